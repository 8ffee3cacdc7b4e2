/* SPDX-License-Identifier: MIT */
/*
 * Which error wins after close, for both engines: once
 * jitring_close() has started, every jitring_write() and jitring_move()
 * returns -ESHUTDOWN whatever its arguments, and is counted in
 * refused_shutdown, not refused_invalid: a NULL entry, an empty or too
 * long name, code_size 0 or too large, a malformed eh_frame, a move to
 * NULL, a move of an index never handed out.  Only a NULL or foreign
 * handle still gets -EINVAL (there is no writer to be closed).  Before the
 * fix the invalid ones returned -EINVAL after close.
 */
#include "filesafety.h"

static void after_close(uint32_t engine)
{
	static const unsigned char code[32], bad_eh[6];
	char dir[128], *longname;
	struct jitring *jr;
	struct jitring_stats st;
	int64_t idx;
	int other;
	const struct jitring_entry ok = {
		.name = "fine", .code_addr = code, .code_size = 16,
	};
	struct jitring_entry bad[6];
	unsigned int nbad = 0, calls = 0;

	longname = malloc(JITRING_NAME_MAX + 2);
	T_REQUIRE(longname);
	memset(longname, 'x', JITRING_NAME_MAX + 1);
	longname[JITRING_NAME_MAX + 1] = 0;
	bad[nbad++] = (struct jitring_entry){ .name = NULL,
					      .code_addr = code,
					      .code_size = 16 };
	bad[nbad++] = (struct jitring_entry){ .name = "",
					      .code_addr = code,
					      .code_size = 16 };
	bad[nbad++] = (struct jitring_entry){ .name = longname,
					      .code_addr = code,
					      .code_size = 16 };
	bad[nbad++] = (struct jitring_entry){ .name = "zero",
					      .code_addr = code,
					      .code_size = 0 };
	bad[nbad++] = (struct jitring_entry){ .name = "huge",
					      .code_addr = code,
					      .code_size = 1ull << 32 };
	bad[nbad++] = (struct jitring_entry){ .name = "eh",
					      .code_addr = code,
					      .code_size = 16,
					      .eh_frame = bad_eh,
					      .eh_frame_size = 6 };

	sf_mkdtemp(dir, NULL);
	T_REQUIRE(t_open(engine, dir, 0, &jr) == 0);
	/* Open: each is refused as invalid. */
	for (unsigned int i = 0; i < nbad; i++) {
		int64_t ret = jitring_write(jr, &bad[i]);

		T_CHECK(ret == -EINVAL || ret == -E2BIG);
	}
	idx = jitring_write(jr, &ok);
	T_CHECK(idx > 0);
	T_CHECK_EQ(jitring_close(jr), 0);
	st = t_stats(jr);
	T_CHECK_EQ(st.refused_shutdown, 0);

	/* Closed: -ESHUTDOWN wins over every argument error. */
	T_CHECK_EQ(jitring_write(jr, NULL), -ESHUTDOWN);
	calls++;
	for (unsigned int i = 0; i < nbad; i++, calls++)
		T_CHECK_EQ(jitring_write(jr, &bad[i]), -ESHUTDOWN);
	T_CHECK_EQ(jitring_write(jr, &ok), -ESHUTDOWN);
	calls++;
	T_CHECK_EQ(jitring_move(jr, (uint64_t)idx, NULL, code, 16),
		   -ESHUTDOWN);
	calls++;
	T_CHECK_EQ(jitring_move(jr, (uint64_t)idx, &other, code, 0),
		   -ESHUTDOWN);
	calls++;
	T_CHECK_EQ(jitring_move(jr, (uint64_t)idx + 1000000, &other, code,
				16), -ESHUTDOWN);
	calls++;
	T_CHECK_EQ(jitring_move(jr, 0, &other, code, 16), -ESHUTDOWN);
	calls++;
	st = t_stats(jr);
	T_CHECK_EQ(st.refused_shutdown, calls);
	/* Nothing more was counted as invalid after close. */
	T_CHECK_EQ(st.refused_invalid, nbad);
	/* No writer at all: -EINVAL. */
	T_CHECK_EQ(jitring_write(NULL, &bad[0]), -EINVAL);
	T_CHECK_EQ(jitring_move(NULL, 1, &other, code, 16), -EINVAL);
	free(longname);
	t_rmtree(dir);
	jitring_thread_detach(NULL);
}

int main(void)
{
	for (size_t i = 0; i < 2; i++)
		t_run("after_close", t_engines[i], after_close);
	return t_report();
}
