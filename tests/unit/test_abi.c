/* SPDX-License-Identifier: MIT */
/*
 * The caller-sized structs as an ABI: what a caller built against an older
 * (smaller) or newer (larger) header gets.
 *
 * Each struct is placed at the very end of a page followed by a PROT_NONE
 * guard page, with struct_size saying exactly how much is there, so a
 * library that reads or writes one byte past struct_size faults instead of
 * passing.  Version 1 is the smallest size accepted; the sizes are frozen
 * (JITRING_*_SIZE_V1) and checked against the layout.
 *
 *  - config: below v1 -EINVAL; exactly v1 (a caller built before version
 *    2 appended ready_rings and ready_copies) works; larger with zero
 *    unknown bytes works, with a non-zero one -E2BIG (nothing created);
 *  - stats: below v1 untouched; exactly v1 filled to v1 and not past it;
 *    larger: filled to the library's size, the caller's further bytes left
 *    as they were, struct_size kept;
 *  - trampoline template: as config;
 *  - entry: flags must be 0 (a later version announces appended fields
 *    with a bit there); name given in pieces.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "jitring.h"

static char dir[] = "/tmp/jitring-abi-XXXXXX";
static long pagesz;

/* @size bytes that end where a guard page begins. */
static void *at_page_end(size_t size)
{
	uint8_t *p = mmap(NULL, 2 * (size_t)pagesz, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	T_REQUIRE(p != MAP_FAILED);
	T_REQUIRE(mprotect(p + pagesz, (size_t)pagesz, PROT_NONE) == 0);
	return p + pagesz - size;
}

static void unmap_page_end(void *p, size_t size)
{
	munmap((uint8_t *)p + size - pagesz, 2 * (size_t)pagesz);
}

static bool dump_exists(void)
{
	char path[128];
	struct stat st;

	snprintf(path, sizeof(path), "%s/jit-%d.dump", dir, (int)getpid());
	return stat(path, &st) == 0;
}

static void test_layout(void)
{
	T_CHECK_EQ(JITRING_CONFIG_SIZE_V1,
		   offsetof(struct jitring_config, reserved) + 4);
	T_CHECK_EQ(JITRING_STATS_SIZE_V1,
		   offsetof(struct jitring_stats, trampoline_arenas_waited) +
			   8);
	T_CHECK_EQ(JITRING_CONFIG_SIZE_V2,
		   offsetof(struct jitring_config, ready_copies) + 4);
	T_CHECK_EQ(JITRING_STATS_SIZE_V2,
		   offsetof(struct jitring_stats, rings_grown_waited) + 8);
	/* Version 1 callers exist: version 2 only appended. */
	T_CHECK(JITRING_CONFIG_SIZE_V2 > JITRING_CONFIG_SIZE_V1);
	T_CHECK(JITRING_STATS_SIZE_V2 > JITRING_STATS_SIZE_V1);
	T_CHECK_EQ(JITRING_TRAMPOLINE_TEMPLATE_SIZE_V1,
		   offsetof(struct jitring_trampoline_template, reserved) + 4);
	T_CHECK(sizeof(struct jitring_config) >= JITRING_CONFIG_SIZE_V1);
	T_CHECK(sizeof(struct jitring_stats) >= JITRING_STATS_SIZE_V1);
	T_CHECK_EQ(offsetof(struct jitring_entry, flags), 56);
	T_CHECK_EQ(sizeof(struct jitring_entry), 72);
}

static void test_config(void)
{
	const size_t v1 = JITRING_CONFIG_SIZE_V1;
	struct jitring_config *c;
	struct jitring *jr = NULL;
	uint8_t *big;

	/* Exactly version 1, nothing readable after it. */
	c = at_page_end(v1);
	memset(c, 0, v1);
	c->struct_size = (uint32_t)v1;
	c->dir = dir;
	T_CHECK_EQ(jitring_open(c, &jr), 0);
	T_CHECK(dump_exists());
	T_CHECK_EQ(jitring_close(jr), 0);

	/* Below version 1. */
	c->struct_size = (uint32_t)v1 - 8;
	jr = NULL;
	T_CHECK_EQ(jitring_open(c, &jr), -EINVAL);
	T_CHECK(jr == NULL);
	unmap_page_end(c, v1);

	/* A newer caller: unknown bytes zero, then one non-zero. */
	big = at_page_end(v1 + 40);
	memset(big, 0, v1 + 40);
	c = (struct jitring_config *)big;
	c->struct_size = (uint32_t)v1 + 40;
	c->dir = dir;
	T_CHECK_EQ(jitring_open(c, &jr), 0); /* continues the closed dump */
	T_CHECK_EQ(jitring_close(jr), 0);
	big[v1 + 39] = 1;
	jr = NULL;
	T_CHECK_EQ(jitring_open(c, &jr), -E2BIG);
	T_CHECK(jr == NULL);
	unmap_page_end(big, v1 + 40);
}

static struct jitring *open_plain(uint32_t engine)
{
	struct jitring_config cfg;
	struct jitring *jr = NULL;

	jitring_config_init(&cfg);
	cfg.dir = dir;
	cfg.engine = engine;
	T_REQUIRE(jitring_open(&cfg, &jr) == 0);
	return jr;
}

static void test_stats(struct jitring *jr)
{
	const size_t v1 = JITRING_STATS_SIZE_V1, lib = sizeof(struct jitring_stats);
	struct jitring_stats *st;
	uint8_t *big;

	/* Below version 1: untouched. */
	st = at_page_end(v1);
	memset(st, 0xa5, v1);
	st->struct_size = (uint32_t)v1 - 8;
	jitring_stats(jr, st);
	T_CHECK_EQ(st->engine, 0xa5a5a5a5u);
	/* Exactly version 1: filled up to the guard, not past it. */
	st->struct_size = (uint32_t)v1;
	jitring_stats(jr, st);
	T_CHECK_EQ(st->struct_size, v1);
	T_CHECK_EQ(st->engine, JITRING_ENGINE_RINGS);
	T_CHECK_EQ(st->bytes_written, 40);
	T_CHECK_EQ(st->trampoline_arenas_waited, 0);
	unmap_page_end(st, v1);

	/* A newer caller: its further bytes are left alone. */
	big = at_page_end(lib + 24);
	memset(big, 0xa5, lib + 24);
	st = (struct jitring_stats *)big;
	st->struct_size = (uint32_t)lib + 24;
	jitring_stats(jr, st);
	T_CHECK_EQ(st->struct_size, lib + 24);
	T_CHECK_EQ(st->bytes_written, 40);
	for (size_t i = lib; i < lib + 24; i++)
		T_CHECK_EQ(big[i], 0xa5);
	unmap_page_end(big, lib + 24);
}

static void test_template(struct jitring *jr)
{
	const size_t v1 = JITRING_TRAMPOLINE_TEMPLATE_SIZE_V1;
	struct jitring_trampoline_template host, *t;
	struct jitring_trampolines *set = NULL;
	uint8_t *big;

	if (jitring_trampoline_builtin(&host) == -EOPNOTSUPP) {
		printf("no built-in trampoline here: template cases skipped\n");
		return;
	}
	t = at_page_end(v1);
	memcpy(t, &host, v1);
	t->struct_size = (uint32_t)v1;
	T_CHECK_EQ(jitring_trampolines_new(jr, t, &set), 0);
	T_CHECK(set != NULL);
	t->struct_size = (uint32_t)v1 - 4;
	T_CHECK_EQ(jitring_trampolines_new(jr, t, &set), -EINVAL);
	unmap_page_end(t, v1);

	big = at_page_end(v1 + 16);
	memset(big, 0, v1 + 16);
	memcpy(big, &host, v1);
	t = (struct jitring_trampoline_template *)big;
	t->struct_size = (uint32_t)v1 + 16;
	big[v1 + 15] = 7;
	T_CHECK_EQ(jitring_trampolines_new(jr, t, &set), -E2BIG);
	unmap_page_end(big, v1 + 16);
}

static void test_entry(struct jitring *jr)
{
	static const uint8_t code[8] = { 0xc3 };
	const struct jitring_str parts[] = {
		{ "py::", 4 }, { "f", 1 }, { "", 0 }, { ":/a.py", 6 },
	};
	const struct jitring_str nul[] = { { "a\0b", 3 } };
	struct jitring_entry e = {
		.name = "f",
		.code_addr = (void *)0x1000,
		.code_size = sizeof(code),
		.code_bytes = code,
	};

	e.flags = 1;
	T_CHECK_EQ(jitring_write(jr, &e), -EINVAL);
	e.flags = 0;
	T_CHECK(jitring_write(jr, &e) > 0);
	/* Both, or neither, of name and name_parts. */
	e.name_parts = parts;
	e.nr_name_parts = 4;
	T_CHECK_EQ(jitring_write(jr, &e), -EINVAL);
	e.name = NULL;
	T_CHECK(jitring_write(jr, &e) > 0);
	e.nr_name_parts = 0;
	T_CHECK_EQ(jitring_write(jr, &e), -EINVAL);
	e.name_parts = nul;
	e.nr_name_parts = 1;
	T_CHECK_EQ(jitring_write(jr, &e), -EINVAL);
	e.nr_name_parts = JITRING_NAME_PARTS_MAX + 1;
	T_CHECK_EQ(jitring_write(jr, &e), -EINVAL);
}

int main(void)
{
	struct jitring *jr;

	pagesz = sysconf(_SC_PAGESIZE);
	T_REQUIRE(mkdtemp(dir) != NULL);
	test_layout();
	test_config();
	jr = open_plain(JITRING_ENGINE_RINGS);
	test_stats(jr);
	test_template(jr);
	test_entry(jr);
	T_CHECK_EQ(jitring_close(jr), 0);
	/* The mutex engine writes a name in pieces its own way. */
	jr = open_plain(JITRING_ENGINE_MUTEX);
	test_entry(jr);
	T_CHECK_EQ(jitring_close(jr), 0);
	{
		/* The pieces landed as one name. */
		static const char want[] = "py::f:/a.py";
		char path[128];
		struct stat st;
		FILE *f;
		char *buf;

		snprintf(path, sizeof(path), "%s/jit-%d.dump", dir,
			 (int)getpid());
		T_REQUIRE(stat(path, &st) == 0 && (f = fopen(path, "rb")));
		buf = malloc((size_t)st.st_size);
		T_REQUIRE(buf && fread(buf, 1, (size_t)st.st_size, f) ==
					 (size_t)st.st_size);
		/* Once per engine. */
		char *hit = memmem(buf, (size_t)st.st_size, want, sizeof(want));

		T_CHECK(hit != NULL);
		T_CHECK(hit && memmem(hit + 1, (size_t)st.st_size -
						       (size_t)(hit + 1 - buf),
				      want, sizeof(want)) != NULL);
		free(buf);
		fclose(f);
	}
	t_rmtree(dir);
	return t_report();
}
