/* SPDX-License-Identifier: MIT */
/*
 * tests/harness.h says what happened: each case runs the harness in a
 * child (its own counters, its output in a pipe) and checks the child's
 * exit status and what it printed.
 *   1. a failed check, then t_skip(): exit 1, and it says why;
 *   2. no check at all, then t_report(): exit 1;
 *   3. a passed check, then t_skip(): exit 77;
 *   4. a passed check, then t_report(): exit 0;
 *   5. T_REQUIRE() failing: exit 1.
 */
#include <sys/wait.h>

#include "harness.h"

enum child_case {
	FAIL_THEN_SKIP,
	NO_CHECK,
	PASS_THEN_SKIP,
	PASS,
	REQUIRE,
};

static void child_body(enum child_case c)
{
	/* The parent's counts came along with fork(). */
	atomic_store(&t_passed, 0);
	atomic_store(&t_failed, 0);
	switch (c) {
	case FAIL_THEN_SKIP:
		T_CHECK(1 == 2);
		t_skip("no tool");
		break;
	case NO_CHECK:
		break;
	case PASS_THEN_SKIP:
		T_CHECK(1 == 1);
		t_skip("no tool");
		break;
	case PASS:
		T_CHECK_EQ(2, 2);
		break;
	case REQUIRE:
		T_REQUIRE(1 == 2);
		break;
	}
	exit(t_report());
}

/* Runs case @c in a child; its exit status, and its output in @out. */
static int run_child(enum child_case c, char *out, size_t size)
{
	int fds[2], status = -1;
	size_t len = 0;
	ssize_t n;
	pid_t pid;

	T_REQUIRE(pipe(fds) == 0);
	pid = fork();
	T_REQUIRE(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		dup2(fds[1], STDOUT_FILENO);
		dup2(fds[1], STDERR_FILENO);
		child_body(c);
	}
	close(fds[1]);
	while (len + 1 < size &&
	       (n = read(fds[0], out + len, size - 1 - len)) > 0)
		len += (size_t)n;
	out[len] = '\0';
	close(fds[0]);
	T_REQUIRE(waitpid(pid, &status, 0) == pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void expect(enum child_case c, int status, const char *says)
{
	char out[4096];
	int got = run_child(c, out, sizeof(out));

	T_CHECK_EQ(got, status);
	T_CHECK(strstr(out, says) != NULL);
	if (got != status || !strstr(out, says))
		fprintf(stderr, "case %d printed:\n%s", (int)c, out);
}

int main(void)
{
	expect(FAIL_THEN_SKIP, T_EXIT_FAIL,
	       "skipped after 1 failed check(s): the test fails");
	expect(NO_CHECK, T_EXIT_FAIL, "FAIL: the test made no check");
	expect(PASS_THEN_SKIP, T_EXIT_SKIP, "1 passed, 0 failed");
	expect(PASS, T_EXIT_PASS, "1 passed, 0 failed");
	expect(REQUIRE, T_EXIT_FAIL, "requirement failed");
	return t_report();
}
