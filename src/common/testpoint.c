/* SPDX-License-Identifier: MIT */
/* The test-only hooks of testpoint.h: set by tests, read everywhere. */
#include "testpoint.h"

#ifdef JITRING_TESTPOINTS
jitring_io_hook_fn jitring_io_hook;
_Atomic(jitring_testpoint_fn) jitring_testpoint_hook;
_Atomic(jitring_fault_fn) jitring_fault_hook;
#endif
