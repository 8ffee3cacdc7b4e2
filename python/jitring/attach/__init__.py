# SPDX-License-Identifier: MIT
"""record --pid, record's side (the target's side is jitring._target)."""
