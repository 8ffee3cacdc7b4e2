# SPDX-License-Identifier: MIT
"""The profile's model and the rules that make it: which frames are the
program's, cut stacks, record --pid's window, counts."""
