# SPDX-License-Identifier: MIT
"""The recording's folder, errors and name escaping: what every step
below shares."""
