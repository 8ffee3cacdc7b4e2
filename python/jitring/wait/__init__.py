# SPDX-License-Identifier: MIT
"""record --wait: where threads waited off CPU, and why."""
