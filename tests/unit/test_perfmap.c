// SPDX-License-Identifier: MIT
/*
 * JITRING_F_PERF_MAP: /tmp/perf-<pid>.map holds one line per CODE_LOAD of
 * the dump, in the dump's order, with control characters in names replaced
 * so a name can never split or forge a line; both engines; a later writer
 * of the same process appends; an open writer's map is not shared.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "jitring.h"
#include "core/perfmap.h"
#include "reader/reader.h"

/* The dump's LOADs, as the lines the map must hold, in order. */
static char *expected_lines(const char *dump, unsigned *loads)
{
	struct jitring_rd_header h;
	struct jitring_rd_record rec;
	struct jitring_reader rd;
	size_t len, cap = 1 << 20, n = 0;
	char *buf = (char *)t_slurp(dump, &len), *out = malloc(cap);

	*loads = 0;
	T_REQUIRE(buf && out);
	T_REQUIRE(jitring_reader_init(&rd, buf, len, 0, &h) == 0);
	while (jitring_reader_next(&rd, &rec) == 1) {
		if (rec.id != 0)
			continue;
		/* Independent of perfmap.c: printf and a plain loop. */
		n += (size_t)snprintf(out + n, cap - n, "%llx %llx ",
				      (unsigned long long)rec.code_addr,
				      (unsigned long long)rec.code_size);
		for (const char *p = rec.name; *p; p++)
			out[n++] = (unsigned char)*p < 0x20 || *p == 0x7f ?
					   '?' : *p;
		out[n++] = '\n';
		(*loads)++;
	}
	out[n] = 0;
	free(buf);
	return out;
}

struct worker {
	struct jitring *jr;
	int t;
};

static void *worker(void *arg)
{
	struct worker *w = arg;
	static const unsigned char code[48];

	for (int i = 0; i < 200; i++) {
		char name[64];
		struct jitring_entry e = {
			.name = name,
			.code_addr = code + (i % 40),
			.code_size = 8,
		};

		snprintf(name, sizeof(name), "t%d\tfn\n%d\x7f", w->t, i);
		T_CHECK(jitring_write(w->jr, &e) > 0);
	}
	return NULL;
}

static void run(int engine, const char *dir, const char *map,
		size_t *map_len_before)
{
	struct jitring_config cfg;
	struct jitring *jr, *jr2;
	struct worker w[4];
	pthread_t tid[4];
	char dump[512], *want, *got;
	unsigned loads;
	size_t len;

	jitring_config_init(&cfg);
	cfg.engine = (uint32_t)engine;
	cfg.dir = dir;
	cfg.flags = JITRING_F_PERF_MAP;
	T_REQUIRE(jitring_open(&cfg, &jr) == 0);
	/* One map per process: not shared by two open writers. */
	cfg.dir = "/tmp";
	T_CHECK_EQ(jitring_open(&cfg, &jr2), -EEXIST);

	for (int t = 0; t < 4; t++) {
		w[t] = (struct worker){ jr, t };
		pthread_create(&tid[t], NULL, worker, &w[t]);
	}
	for (int t = 0; t < 4; t++)
		pthread_join(tid[t], NULL);
	/* A move adds nothing to the map. */
	{
		static const unsigned char code[16];
		struct jitring_entry e = {
			.name = "moved", .code_addr = code, .code_size = 16,
		};
		int64_t id = jitring_write(jr, &e);

		T_REQUIRE(id > 0);
		T_CHECK_EQ(jitring_move(jr, (uint64_t)id, code + 8, code, 8),
			   0);
	}
	T_CHECK_EQ(jitring_flush(jr), 0);
	T_CHECK_EQ(jitring_close(jr), 0);

	snprintf(dump, sizeof(dump), "%s/jit-%d.dump", dir, (int)getpid());
	want = expected_lines(dump, &loads);
	T_CHECK_EQ(loads, 801);
	got = (char *)t_slurp(map, &len);
	T_REQUIRE(got);
	T_REQUIRE(len >= *map_len_before);
	T_CHECK_EQ(len - *map_len_before, strlen(want));
	T_CHECK(strcmp(got + *map_len_before, want) == 0);
	/* No raw control characters anywhere but line ends. */
	for (size_t i = 0; i < len; i++)
		T_CHECK(got[i] == '\n' || ((unsigned char)got[i] >= 0x20 &&
					   got[i] != 0x7f));
	*map_len_before = len;
	unlink(dump);
	free(want);
	free(got);
}

int main(void)
{
	char dir[] = "/tmp/jitring-perfmap-XXXXXX", map[64];
	char line[JR_PERFMAP_LINE_MAX];
	size_t before = 0, n;

	T_REQUIRE(mkdtemp(dir));
	snprintf(map, sizeof(map), "/tmp/perf-%d.map", (int)getpid());
	unlink(map);

	/* The formatter on its own. */
	n = jitring_perfmap_line(line, 0x7f00dead0000ull, 0x30, "a\nb\rc", 5);
	T_CHECK_EQ(n, strlen("7f00dead0000 30 a?b?c\n"));
	T_CHECK(memcmp(line, "7f00dead0000 30 a?b?c\n", n) == 0);

	/* Rings, then mutex: the second writer appends to the same map. */
	run(JITRING_ENGINE_RINGS, dir, map, &before);
	run(JITRING_ENGINE_MUTEX, dir, map, &before);

	unlink(map);
	rmdir(dir);
	return t_report();
}
