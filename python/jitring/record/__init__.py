# SPDX-License-Identifier: MIT
"""python -m jitring record and report: the command lines, the program
as a job, perf beside it, the finishing."""
