# SPDX-License-Identifier: MIT
"""Driving perf and reading what it writes: perf.data, perf script's
text, the dumps' symbols, the reading while the program runs."""
