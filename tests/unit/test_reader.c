/* SPDX-License-Identifier: MIT */
/*
 * Reader and validator tests.  Every jitdump image here is built byte by
 * byte with a tiny builder below, never with the library's encoder, so the
 * reader is checked against the format description alone.
 *
 *  1. round trip: a valid file with every record type, every field decoded;
 *  2. corpus: one corrupted file (or more) per rule, each rejected with
 *     exactly that rule name at the expected offset, and every rule of
 *     jitring_check_rules() covered;
 *  3. acceptance: zero tails, truncated tails, CLOSE last, --sorted, groups;
 *  4. scale: 200,000 loads (100,000 tids) checked in linear time;
 *  5. streams: every file of 1-4 checked again through a regular file and
 *     a pipe, with windows of 1 byte and up, gives the same result as the
 *     whole buffer (rule, offset, summary);
 *  6. the jitring-dump binary (needs JITRING_BUILD_ROOT).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "reader/reader.h"

#define PID 4242u
#define EM_X86_64 62u

/* Byte-buffer builder. */
struct bb {
	unsigned char *p;
	size_t len;
	size_t cap;
};

static void bb_put(struct bb *b, const void *src, size_t n)
{
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;

		while (cap < b->len + n)
			cap *= 2;
		b->p = realloc(b->p, cap);
		T_REQUIRE(b->p);
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->len, src, n);
	b->len += n;
}

static void bb_u8(struct bb *b, uint8_t v)
{
	bb_put(b, &v, 1);
}

static void bb_u32(struct bb *b, uint32_t v)
{
	bb_put(b, &v, 4);
}

static void bb_i32(struct bb *b, int32_t v)
{
	bb_put(b, &v, 4);
}

static void bb_u64(struct bb *b, uint64_t v)
{
	bb_put(b, &v, 8);
}

static void bb_zero(struct bb *b, size_t n)
{
	while (n--)
		bb_u8(b, 0);
}

/* The string and its NUL. */
static void bb_str(struct bb *b, const char *s)
{
	bb_put(b, s, strlen(s) + 1);
}

static void bb_set32(struct bb *b, size_t off, uint32_t v)
{
	memcpy(b->p + off, &v, 4);
}

static void bb_set64(struct bb *b, size_t off, uint64_t v)
{
	memcpy(b->p + off, &v, 8);
}

static void bb_reset(struct bb *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

static void hdr(struct bb *b)
{
	bb_u32(b, 0x4A695444u);
	bb_u32(b, 1);
	bb_u32(b, 40);
	bb_u32(b, EM_X86_64);
	bb_u32(b, 0);
	bb_u32(b, PID);
	bb_u64(b, 999);
	bb_u64(b, 0);
}

static size_t rec_begin(struct bb *b, uint32_t id, uint64_t ts)
{
	size_t off = b->len;

	bb_u32(b, id);
	bb_u32(b, 0); /* patched by rec_end() */
	bb_u64(b, ts);
	return off;
}

static void rec_end(struct bb *b, size_t off)
{
	bb_set32(b, off + 4, (uint32_t)(b->len - off));
}

static unsigned char code_byte(size_t i)
{
	return (unsigned char)(i * 7 + 1);
}

/* CODE_LOAD with @pad zero bytes between the name's NUL and the code. */
static size_t load(struct bb *b, uint64_t ts, uint32_t tid, uint64_t addr,
		   uint64_t index, const char *name, size_t pad,
		   uint64_t code_size)
{
	size_t off = rec_begin(b, 0, ts);
	uint64_t i;

	bb_u32(b, PID);
	bb_u32(b, tid);
	bb_u64(b, addr);
	bb_u64(b, addr);
	bb_u64(b, code_size);
	bb_u64(b, index);
	bb_str(b, name);
	bb_zero(b, pad);
	for (i = 0; i < code_size; i++)
		bb_u8(b, code_byte(i));
	rec_end(b, off);
	return off;
}

static size_t move(struct bb *b, uint64_t ts, uint32_t tid, uint64_t old_addr,
		   uint64_t new_addr, uint64_t code_size, uint64_t index)
{
	size_t off = rec_begin(b, 1, ts);

	bb_u32(b, PID);
	bb_u32(b, tid);
	bb_u64(b, new_addr);
	bb_u64(b, old_addr);
	bb_u64(b, new_addr);
	bb_u64(b, code_size);
	bb_u64(b, index);
	rec_end(b, off);
	return off;
}

struct row {
	uint64_t addr;
	int32_t line;
	int32_t discrim;
	const char *file;
};

static size_t debug(struct bb *b, uint64_t ts, uint64_t code_addr,
		    const struct row *rows, size_t n, size_t pad)
{
	size_t off = rec_begin(b, 2, ts), i;

	bb_u64(b, code_addr);
	bb_u64(b, n);
	for (i = 0; i < n; i++) {
		bb_u64(b, rows[i].addr);
		bb_i32(b, rows[i].line);
		bb_i32(b, rows[i].discrim);
		bb_str(b, rows[i].file);
	}
	bb_zero(b, pad);
	rec_end(b, off);
	return off;
}

static size_t close_rec(struct bb *b, uint64_t ts)
{
	size_t off = rec_begin(b, 3, ts);

	rec_end(b, off);
	return off;
}

#define EH_SIZE 40u

/* UNWINDING_INFO: EH_SIZE bytes of .eh_frame, the 20-byte hdr, @pad. */
static size_t unwind(struct bb *b, uint64_t ts, size_t pad)
{
	size_t off = rec_begin(b, 4, ts), i;

	bb_u64(b, EH_SIZE + 20);
	bb_u64(b, 20);
	bb_u64(b, (EH_SIZE + 20 + 15) & ~15u);
	for (i = 0; i < EH_SIZE; i++)
		bb_u8(b, (uint8_t)(0xa0 + i));
	bb_u8(b, 1);
	bb_u8(b, 0x1b);
	bb_u8(b, 0x03);
	bb_u8(b, 0x3b);
	bb_i32(b, -(int32_t)(EH_SIZE + 4)); /* eh_frame_ptr */
	bb_u32(b, 1); /* fde_count */
	bb_i32(b, -4096); /* initial_loc */
	bb_i32(b, -(int32_t)EH_SIZE + 20); /* fde */
	bb_zero(b, pad);
	rec_end(b, off);
	return off;
}

/* Offsets of the records of the reference file. */
struct valid_offs {
	size_t unwind, debug, load1, load2, move, close;
};

#define ADDR1 0x7f0000001000ull
#define ADDR2 0x7f0000002000ull
#define ADDR3 0x7f0000003000ull

static const struct row rows1[] = {
	{ ADDR1, 10, 0, "a.js" },
	{ ADDR1 + 4, 11, 2, "" },
	{ ADDR1 + 9, -1, 0, "dir/b.js" },
};

static void build_valid(struct bb *b, struct valid_offs *o)
{
	struct valid_offs dummy;

	if (!o)
		o = &dummy;
	hdr(b);
	o->unwind = unwind(b, 100, 4);
	o->debug = debug(b, 110, ADDR1, rows1, 3, 5);
	o->load1 = load(b, 120, 7, ADDR1, 1, "fn_one", 3, 16);
	o->load2 = load(b, 130, 8, ADDR2, 2, "fn_two", 0, 5);
	o->move = move(b, 140, 9, ADDR1, ADDR3, 16, 1);
	o->close = close_rec(b, 150);
}

/*
 * Streams must agree with the whole-buffer check.  Each file is checked
 * through a memfd (a regular file, read with pread) and, when it fits in a
 * pipe's buffer, through a pipe, with windows of several sizes.
 */
static const size_t chunks[] = { 1, 2, 7, 16, 41, 4096, JITRING_STREAM_CHUNK };

static int stream_fd(const void *p, size_t len, bool pipe_fd)
{
	int fds[2], fd;

	if (pipe_fd) {
		if (len > 65536 || pipe(fds))
			return -1;
		if (len && write(fds[1], p, len) != (ssize_t)len) {
			close(fds[0]);
			close(fds[1]);
			return -1;
		}
		close(fds[1]);
		return fds[0];
	}
	fd = memfd_create("jitring-test", MFD_CLOEXEC);
	T_REQUIRE(fd >= 0);
	T_REQUIRE(len == 0 || write(fd, p, len) == (ssize_t)len);
	return fd;
}

/*
 * @piped: a pipe is not read on past a violation, so file_size is what was
 * read then; and the first load of a duplicate index cannot be looked up.
 */
static bool same_result(const struct jitring_check_result *a,
			const struct jitring_check_result *b, bool piped)
{
	if (!piped && a->file_size != b->file_size)
		return false;
	if (piped && !a->rule && a->file_size != b->file_size)
		return false;
	if (!a->rule != !b->rule || (a->rule && strcmp(a->rule, b->rule)) ||
	    a->off != b->off || (!piped && strcmp(a->detail, b->detail)) ||
	    memcmp(&a->header, &b->header, sizeof(a->header)) ||
	    memcmp(a->count, b->count, sizeof(a->count)) ||
	    a->records != b->records || a->pids != b->pids ||
	    a->tids != b->tids || a->ts_min != b->ts_min ||
	    a->ts_max != b->ts_max ||
	    a->lines_uncovered != b->lines_uncovered ||
	    a->lines_uncovered_off != b->lines_uncovered_off ||
	    a->zero_tail != b->zero_tail || a->truncated != b->truncated)
		return false;
	return true;
}

/* The record-by-record stream walks like the reader over the buffer. */
static void stream_walk_agrees(const void *p, size_t len, unsigned int tflag,
			       int fd, size_t chunk)
{
	struct jitring_reader r;
	struct jitring_rd_stream st;
	struct jitring_rd_record a, b;
	int ra, rb;

	T_REQUIRE(lseek(fd, 0, SEEK_SET) == 0);
	T_REQUIRE(jitring_stream_open(&st, fd, tflag) == 0);
	st.chunk = chunk;
	ra = jitring_reader_init(&r, p, len, tflag, NULL);
	rb = jitring_stream_next(&st, &b);
	if (ra) {
		T_CHECK_EQ(rb, ra);
	} else {
		for (;;) {
			ra = jitring_reader_next(&r, &a);
			if (ra != rb || ra != 1)
				break;
			if (a.off != b.off || a.id != b.id ||
			    a.size != b.size || memcmp(a.raw, b.raw, a.size)) {
				T_CHECK(!"stream record differs");
				break;
			}
			rb = jitring_stream_next(&st, &b);
		}
		T_CHECK_EQ(rb, ra);
		T_CHECK_EQ(st.r.zero_tail, r.zero_tail);
		T_CHECK_EQ(st.r.truncated, r.truncated);
	}
	if (ra == -EBADMSG && rb == -EBADMSG) {
		T_CHECK(strcmp(st.r.rule, r.rule) == 0);
		T_CHECK_EQ(st.r.err_off, r.err_off);
	}
	jitring_stream_close(&st);
}

/* Return: jitring_check() of the buffer, after comparing the streams. */
static int check_agrees(const void *p, size_t len, unsigned int flags,
			struct jitring_check_result *res)
{
	unsigned int tflag = flags & JITRING_CHECK_ALLOW_TRUNCATED;
	struct jitring_check_result sres;
	struct jitring_rd_stream st;
	int ret, sret, fd, piped;
	size_t i;

	ret = jitring_check(p, len, flags, res);
	for (piped = 0; piped < 2; piped++) {
		for (i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
			fd = stream_fd(p, len, piped);
			if (fd < 0)
				break;
			T_REQUIRE(jitring_stream_open(&st, fd, tflag) == 0);
			st.chunk = chunks[i];
			sret = jitring_check_stream(&st, flags, &sres);
			jitring_stream_close(&st);
			if (sret != ret || !same_result(res, &sres, piped)) {
				t_failed++;
				fprintf(stderr,
					"stream (%s, chunk %zu) disagrees: %d %s @%llu (%s) vs %d %s @%llu (%s)\n",
					piped ? "pipe" : "file", chunks[i],
					sret, sres.rule ? sres.rule : "-",
					(unsigned long long)sres.off,
					sres.detail, ret,
					res->rule ? res->rule : "-",
					(unsigned long long)res->off,
					res->detail);
			} else {
				t_passed++;
			}
			if (!piped && chunks[i] <= 16)
				stream_walk_agrees(p, len, tflag, fd,
						   chunks[i]);
			close(fd);
		}
	}
	return ret;
}

static void test_round_trip(void)
{
	struct bb b = { 0 };
	struct valid_offs o;
	struct jitring_reader r;
	struct jitring_rd_header h;
	struct jitring_rd_record rec;
	struct jitring_rd_line line;
	size_t cursor = 0, i;
	int ret, n = 0;

	build_valid(&b, &o);
	T_REQUIRE(jitring_reader_init(&r, b.p, b.len, 0, &h) == 0);
	T_CHECK_EQ(h.magic, 0x4A695444u);
	T_CHECK_EQ(h.version, 1);
	T_CHECK_EQ(h.total_size, 40);
	T_CHECK_EQ(h.elf_mach, EM_X86_64);
	T_CHECK_EQ(h.pad1, 0);
	T_CHECK_EQ(h.pid, PID);
	T_CHECK_EQ(h.timestamp, 999);
	T_CHECK_EQ(h.flags, 0);

	/* UNWINDING_INFO */
	T_REQUIRE(jitring_reader_next(&r, &rec) == 1);
	n++;
	T_CHECK_EQ(rec.off, o.unwind);
	T_CHECK_EQ(rec.id, JITRING_RD_CODE_UNWINDING_INFO);
	T_CHECK_EQ(rec.size, 40 + EH_SIZE + 20 + 4);
	T_CHECK_EQ(rec.ts, 100);
	T_CHECK(rec.raw == b.p + o.unwind);
	T_CHECK_EQ(rec.unwinding_size, EH_SIZE + 20);
	T_CHECK_EQ(rec.eh_frame_hdr_size, 20);
	T_CHECK_EQ(rec.mapped_size, 64);
	T_CHECK_EQ(rec.eh_frame_size, EH_SIZE);
	T_CHECK(rec.unwind == b.p + o.unwind + 40);
	T_CHECK_EQ(rec.unwind[0], 0xa0);
	T_CHECK_EQ(rec.unwind[EH_SIZE], 1);
	T_CHECK_EQ(rec.unwind[EH_SIZE + 3], 0x3b);
	T_CHECK(rec.name == NULL && rec.code == NULL);
	T_CHECK_EQ(jitring_reader_line(&rec, &cursor, &line), -EINVAL);

	/* DEBUG_INFO and its rows */
	T_REQUIRE(jitring_reader_next(&r, &rec) == 1);
	n++;
	T_CHECK_EQ(rec.off, o.debug);
	T_CHECK_EQ(rec.id, JITRING_RD_CODE_DEBUG_INFO);
	T_CHECK_EQ(rec.ts, 110);
	T_CHECK_EQ(rec.size, o.load1 - o.debug);
	T_CHECK_EQ(rec.code_addr, ADDR1);
	T_CHECK_EQ(rec.nr_entry, 3);
	T_CHECK_EQ(rec.entries_end, rec.size - 5);
	cursor = 0;
	for (i = 0; i < 3; i++) {
		ret = jitring_reader_line(&rec, &cursor, &line);
		T_REQUIRE(ret == 1);
		T_CHECK_EQ(line.addr, rows1[i].addr);
		T_CHECK_EQ(line.line, rows1[i].line);
		T_CHECK_EQ(line.discrim, rows1[i].discrim);
		T_CHECK(strcmp(line.file, rows1[i].file) == 0);
	}
	T_CHECK_EQ(jitring_reader_line(&rec, &cursor, &line), 0);
	T_CHECK_EQ(jitring_reader_line(&rec, &cursor, &line), 0);
	cursor = 0;
	T_CHECK_EQ(jitring_reader_line(&rec, &cursor, &line), 1);
	T_CHECK_EQ(line.off, o.debug + 32);

	/* CODE_LOAD with padding between the name and the code */
	T_REQUIRE(jitring_reader_next(&r, &rec) == 1);
	n++;
	T_CHECK_EQ(rec.off, o.load1);
	T_CHECK_EQ(rec.id, JITRING_RD_CODE_LOAD);
	T_CHECK_EQ(rec.size, 56 + 7 + 3 + 16);
	T_CHECK_EQ(rec.ts, 120);
	T_CHECK_EQ(rec.pid, PID);
	T_CHECK_EQ(rec.tid, 7);
	T_CHECK_EQ(rec.vma, ADDR1);
	T_CHECK_EQ(rec.code_addr, ADDR1);
	T_CHECK_EQ(rec.code_size, 16);
	T_CHECK_EQ(rec.code_index, 1);
	T_CHECK(rec.name && strcmp(rec.name, "fn_one") == 0);
	T_CHECK_EQ(rec.name_len, 6);
	T_CHECK(rec.code == b.p + o.load2 - 16);
	for (i = 0; i < 16; i++)
		T_CHECK_EQ(rec.code[i], code_byte(i));

	/* CODE_LOAD without padding */
	T_REQUIRE(jitring_reader_next(&r, &rec) == 1);
	n++;
	T_CHECK_EQ(rec.off, o.load2);
	T_CHECK_EQ(rec.size, 56 + 7 + 5);
	T_CHECK_EQ(rec.tid, 8);
	T_CHECK_EQ(rec.code_index, 2);
	T_CHECK_EQ(rec.code_addr, ADDR2);
	T_CHECK(strcmp(rec.name, "fn_two") == 0);
	T_CHECK(rec.code == rec.raw + 56 + 7);
	T_CHECK_EQ(rec.code[4], code_byte(4));

	/* CODE_MOVE */
	T_REQUIRE(jitring_reader_next(&r, &rec) == 1);
	n++;
	T_CHECK_EQ(rec.off, o.move);
	T_CHECK_EQ(rec.id, JITRING_RD_CODE_MOVE);
	T_CHECK_EQ(rec.size, 64);
	T_CHECK_EQ(rec.ts, 140);
	T_CHECK_EQ(rec.pid, PID);
	T_CHECK_EQ(rec.tid, 9);
	T_CHECK_EQ(rec.vma, ADDR3);
	T_CHECK_EQ(rec.old_code_addr, ADDR1);
	T_CHECK_EQ(rec.new_code_addr, ADDR3);
	T_CHECK_EQ(rec.code_size, 16);
	T_CHECK_EQ(rec.code_index, 1);

	/* CODE_CLOSE */
	T_REQUIRE(jitring_reader_next(&r, &rec) == 1);
	n++;
	T_CHECK_EQ(rec.off, o.close);
	T_CHECK_EQ(rec.id, JITRING_RD_CODE_CLOSE);
	T_CHECK_EQ(rec.size, 16);
	T_CHECK_EQ(rec.ts, 150);

	T_CHECK_EQ(jitring_reader_next(&r, &rec), 0);
	T_CHECK_EQ(jitring_reader_next(&r, &rec), 0);
	T_CHECK_EQ(r.zero_tail, 0);
	T_CHECK_EQ(r.truncated, 0);
	T_CHECK_EQ(n, 6);

	T_CHECK(strcmp(jitring_reader_type_name(0), "CODE_LOAD") == 0);
	T_CHECK(strcmp(jitring_reader_type_name(4),
		       "CODE_UNWINDING_INFO") == 0);
	T_CHECK(strcmp(jitring_reader_type_name(5), "UNKNOWN") == 0);
	bb_reset(&b);
}

static void test_summary(void)
{
	struct bb b = { 0 };
	struct jitring_check_result res;
	struct valid_offs o;

	build_valid(&b, &o);
	T_CHECK_EQ(check_agrees(b.p, b.len, 0, &res), 0);
	T_CHECK(res.rule == NULL);
	/* rows1 ends at +9 of fn_one's 16 bytes: a warning, not a rule. */
	T_CHECK_EQ(res.lines_uncovered, 1);
	T_CHECK_EQ(res.lines_uncovered_off, o.debug);
	T_CHECK_EQ(res.records, 6);
	T_CHECK_EQ(res.count[0], 2);
	T_CHECK_EQ(res.count[1], 1);
	T_CHECK_EQ(res.count[2], 1);
	T_CHECK_EQ(res.count[3], 1);
	T_CHECK_EQ(res.count[4], 1);
	T_CHECK_EQ(res.pids, 1);
	T_CHECK_EQ(res.tids, 3);
	T_CHECK_EQ(res.ts_min, 100);
	T_CHECK_EQ(res.ts_max, 150);
	T_CHECK_EQ(res.file_size, b.len);
	T_CHECK_EQ(res.zero_tail, 0);
	T_CHECK_EQ(res.truncated, 0);
	T_CHECK_EQ(res.header.pid, PID);
	T_CHECK_EQ(check_agrees(b.p, b.len, JITRING_CHECK_SORTED, &res), 0);
	T_CHECK_EQ(check_agrees(b.p, b.len,
				 JITRING_CHECK_SORTED |
					 JITRING_CHECK_ALLOW_TRUNCATED,
				 &res), 0);

	/* Usage errors. */
	T_CHECK_EQ(jitring_check(b.p, b.len, 0, NULL), -EINVAL);
	T_CHECK_EQ(jitring_check(b.p, b.len, 1u << 7, &res), -EINVAL);
	T_CHECK_EQ(jitring_check(NULL, 10, 0, &res), -EINVAL);
	T_CHECK_EQ(jitring_reader_init(NULL, b.p, b.len, 0, NULL), -EINVAL);
	T_CHECK_EQ(jitring_reader_next(NULL, NULL), -EINVAL);

	/* Header only: valid, nothing in it. */
	bb_reset(&b);
	hdr(&b);
	T_CHECK_EQ(check_agrees(b.p, b.len, JITRING_CHECK_SORTED, &res), 0);
	T_CHECK_EQ(res.records, 0);
	T_CHECK_EQ(res.ts_min, 0);
	T_CHECK_EQ(res.file_size, 40);
	bb_reset(&b);
}

/* One corrupted file: built, then expected to break @rule at *@off. */
struct bad_case {
	const char *rule;
	const char *what;
	unsigned int flags;
	size_t (*build)(struct bb *b);
};

static size_t bad_header_short(struct bb *b)
{
	hdr(b);
	b->len = 39;
	return 0;
}

static size_t bad_header_empty(struct bb *b)
{
	(void)b;
	return 0;
}

static size_t bad_header_magic(struct bb *b)
{
	hdr(b);
	bb_set32(b, 0, 0x4454694Au); /* byte-swapped */
	return 0;
}

static size_t bad_header_version(struct bb *b)
{
	hdr(b);
	bb_set32(b, 4, 2);
	return 4;
}

static size_t bad_header_size(struct bb *b)
{
	hdr(b);
	bb_set32(b, 8, 48);
	bb_zero(b, 8);
	return 8;
}

static size_t bad_header_flags(struct bb *b)
{
	hdr(b);
	bb_set64(b, 32, 3);
	return 32;
}

static size_t bad_record_hole(struct bb *b)
{
	size_t off;

	hdr(b);
	load(b, 10, 1, ADDR1, 1, "a", 0, 4);
	off = b->len;
	bb_zero(b, 32);
	load(b, 20, 1, ADDR2, 2, "b", 0, 4);
	return off;
}

static size_t bad_record_small(struct bb *b)
{
	size_t off;

	hdr(b);
	load(b, 10, 1, ADDR1, 1, "a", 0, 4);
	off = rec_begin(b, 3, 20);
	bb_set32(b, off + 4, 8);
	return off;
}

static size_t bad_record_id(struct bb *b)
{
	size_t off;

	hdr(b);
	load(b, 10, 1, ADDR1, 1, "a", 0, 4);
	off = rec_begin(b, 5, 20);
	bb_u64(b, 0);
	rec_end(b, off);
	return off;
}

static size_t bad_record_bounds(struct bb *b)
{
	size_t off;

	hdr(b);
	load(b, 10, 1, ADDR1, 1, "a", 0, 4);
	off = load(b, 20, 1, ADDR2, 2, "b", 0, 40);
	b->len -= 3;
	return off;
}

static size_t bad_record_bounds_prefix(struct bb *b)
{
	size_t off;

	hdr(b);
	load(b, 10, 1, ADDR1, 1, "a", 0, 4);
	off = load(b, 20, 1, ADDR2, 2, "b", 0, 40);
	b->len = off + 9; /* id and total_size readable, ts cut */
	return off;
}

static size_t bad_trailing_garbage(struct bb *b)
{
	static const unsigned char junk[5] = { 0x09, 0xff, 0x00, 0x7e, 0x01 };
	size_t off;

	hdr(b);
	load(b, 10, 1, ADDR1, 1, "a", 0, 4);
	off = b->len;
	bb_put(b, junk, sizeof(junk));
	return off;
}

static size_t bad_trailing_small_size(struct bb *b)
{
	size_t off;

	hdr(b);
	load(b, 10, 1, ADDR1, 1, "a", 0, 4);
	off = b->len;
	bb_u32(b, 0); /* id LOAD ... */
	bb_u32(b, 12); /* ... but total_size < 16, and no ts */
	return off;
}

static size_t bad_load_size(struct bb *b)
{
	size_t off;

	hdr(b);
	off = rec_begin(b, 0, 10);
	bb_u32(b, PID);
	bb_u32(b, 1);
	bb_u64(b, ADDR1);
	bb_u64(b, ADDR1);
	bb_u64(b, 0);
	bb_u64(b, 1); /* code_index; no room for a name */
	rec_end(b, off);
	return off;
}

static size_t bad_load_code_zero(struct bb *b)
{
	size_t off;

	hdr(b);
	load(b, 10, 1, ADDR1, 1, "a", 0, 4);
	off = load(b, 20, 1, ADDR2, 2, "b", 4, 0);
	return off;
}

static size_t bad_load_code_big(struct bb *b)
{
	size_t off;

	hdr(b);
	off = load(b, 20, 1, ADDR2, 2, "bb", 0, 8);
	/* 3 name bytes + 8 code: 11 would leave no byte for the name. */
	bb_set64(b, off + 40, 11);
	return off;
}

static size_t bad_load_name(struct bb *b)
{
	size_t off;

	hdr(b);
	off = load(b, 20, 1, ADDR2, 2, "abc", 0, 8);
	b->p[off + 56 + 3] = 'd'; /* the NUL */
	return off;
}

static size_t bad_load_name_in_code(struct bb *b)
{
	size_t off;

	hdr(b);
	/* code_size one too large: the name's NUL is the code's first byte. */
	off = load(b, 20, 1, ADDR2, 2, "abc", 0, 8);
	bb_set64(b, off + 40, 9);
	return off;
}

static size_t bad_move_size(struct bb *b)
{
	size_t off;

	hdr(b);
	load(b, 10, 1, ADDR1, 1, "a", 0, 4);
	off = move(b, 20, 1, ADDR1, ADDR2, 4, 1);
	bb_zero(b, 8);
	rec_end(b, off);
	return off;
}

static size_t bad_debug_size(struct bb *b)
{
	size_t off;

	hdr(b);
	off = rec_begin(b, 2, 10);
	bb_u64(b, ADDR1);
	rec_end(b, off);
	load(b, 20, 1, ADDR1, 1, "a", 0, 4);
	return off;
}

static size_t bad_debug_overrun(struct bb *b)
{
	size_t off;

	hdr(b);
	off = debug(b, 10, ADDR1, rows1, 2, 0);
	bb_set64(b, off + 24, 3); /* claims a third row */
	load(b, 20, 1, ADDR1, 1, "a", 0, 4);
	/* Row 2 starts after rows 0 ("a.js") and 1 (""). */
	return off + 32 + (16 + 5) + (16 + 1);
}

static size_t bad_debug_nul(struct bb *b)
{
	size_t off;

	hdr(b);
	off = debug(b, 10, ADDR1, rows1, 1, 0);
	b->p[b->len - 1] = 'x'; /* "a.jsx", no NUL */
	load(b, 20, 1, ADDR1, 1, "a", 0, 4);
	return off + 32;
}

static size_t bad_unwind_mapped(struct bb *b)
{
	size_t off;

	hdr(b);
	off = unwind(b, 10, 0);
	bb_set64(b, off + 32, EH_SIZE + 19);
	load(b, 20, 1, ADDR1, 1, "a", 0, 4);
	return off;
}

static size_t bad_unwind_payload(struct bb *b)
{
	size_t off;

	hdr(b);
	off = unwind(b, 10, 0);
	bb_set64(b, off + 16, EH_SIZE + 24); /* 4 bytes past the payload */
	bb_set64(b, off + 32, 1024);
	load(b, 20, 1, ADDR1, 1, "a", 0, 4);
	return off;
}

static size_t bad_unwind_align(struct bb *b)
{
	size_t off;

	hdr(b);
	off = unwind(b, 10, 8);
	bb_set64(b, off + 16, EH_SIZE + 22); /* eh_frame part 42 bytes */
	load(b, 20, 1, ADDR1, 1, "a", 0, 4);
	return off;
}

static size_t bad_unwind_short(struct bb *b)
{
	size_t off;

	hdr(b);
	off = rec_begin(b, 4, 10);
	bb_u64(b, 0);
	bb_u64(b, 20);
	rec_end(b, off);
	return off;
}

static size_t bad_unwind_hdr_size(struct bb *b)
{
	size_t off;

	hdr(b);
	off = unwind(b, 10, 0);
	bb_set64(b, off + 24, 16);
	load(b, 20, 1, ADDR1, 1, "a", 0, 4);
	return off;
}

static size_t bad_unwind_hdr_enc(struct bb *b)
{
	size_t off;

	hdr(b);
	off = unwind(b, 10, 0);
	b->p[off + 40 + EH_SIZE + 1] = 0x1c;
	load(b, 20, 1, ADDR1, 1, "a", 0, 4);
	return off;
}

static size_t bad_unwind_hdr_count(struct bb *b)
{
	size_t off;

	hdr(b);
	off = unwind(b, 10, 0);
	bb_set32(b, off + 40 + EH_SIZE + 8, 2);
	load(b, 20, 1, ADDR1, 1, "a", 0, 4);
	return off;
}

static size_t bad_unwind_hdr_ptr(struct bb *b)
{
	size_t off;

	hdr(b);
	off = unwind(b, 10, 0);
	/* Relative to the hdr instead of to the field. */
	bb_set32(b, off + 40 + EH_SIZE + 4, (uint32_t)-(int32_t)EH_SIZE);
	load(b, 20, 1, ADDR1, 1, "a", 0, 4);
	return off;
}

static size_t bad_group_orphan_move(struct bb *b)
{
	size_t off;

	hdr(b);
	load(b, 10, 1, ADDR1, 1, "a", 0, 4);
	off = debug(b, 20, ADDR2, rows1, 1, 0);
	move(b, 30, 1, ADDR1, ADDR2, 4, 1);
	return off;
}

static size_t bad_group_orphan_close(struct bb *b)
{
	size_t off;

	hdr(b);
	off = unwind(b, 20, 0);
	debug(b, 30, ADDR2, rows1, 1, 0);
	close_rec(b, 40);
	return off;
}

static size_t bad_group_orphan_eof(struct bb *b)
{
	size_t off;

	hdr(b);
	load(b, 10, 1, ADDR1, 1, "a", 0, 4);
	off = unwind(b, 20, 0);
	bb_zero(b, 20);
	return off;
}

static size_t bad_group_duplicate(struct bb *b)
{
	size_t off;

	hdr(b);
	unwind(b, 10, 0);
	off = unwind(b, 20, 0);
	load(b, 30, 1, ADDR1, 1, "a", 0, 4);
	return off;
}

static size_t bad_group_duplicate_debug(struct bb *b)
{
	size_t off;

	hdr(b);
	debug(b, 10, ADDR1, rows1, 1, 0);
	unwind(b, 15, 0);
	off = debug(b, 20, ADDR1, rows1, 2, 0);
	load(b, 30, 1, ADDR1, 1, "a", 0, 4);
	return off;
}

static size_t bad_group_mismatch(struct bb *b)
{
	size_t off;

	hdr(b);
	off = debug(b, 10, ADDR2, rows1, 3, 0);
	load(b, 20, 1, ADDR1, 1, "a", 0, 4);
	return off;
}

static size_t bad_index_duplicate(struct bb *b)
{
	size_t off;

	hdr(b);
	load(b, 10, 1, ADDR1, 1, "a", 0, 4);
	load(b, 20, 1, ADDR2, 2, "b", 0, 4);
	off = load(b, 30, 1, ADDR3, 1, "c", 0, 4);
	return off;
}

static size_t bad_index_duplicate_zero(struct bb *b)
{
	size_t off;

	hdr(b);
	load(b, 10, 1, ADDR1, 0, "a", 0, 4);
	move(b, 15, 1, ADDR1, ADDR2, 4, 0);
	off = load(b, 20, 1, ADDR3, 0, "b", 0, 4);
	return off;
}

static size_t bad_move_unknown(struct bb *b)
{
	size_t off;

	hdr(b);
	load(b, 10, 1, ADDR1, 1, "a", 0, 4);
	off = move(b, 20, 1, ADDR1, ADDR2, 4, 9);
	return off;
}

static size_t bad_move_before_load(struct bb *b)
{
	size_t off;

	hdr(b);
	off = move(b, 10, 1, ADDR1, ADDR2, 4, 1);
	load(b, 20, 1, ADDR1, 1, "a", 0, 4);
	return off;
}

static size_t bad_close_not_last(struct bb *b)
{
	size_t off;

	hdr(b);
	load(b, 10, 1, ADDR1, 1, "a", 0, 4);
	close_rec(b, 20);
	off = load(b, 30, 1, ADDR2, 2, "b", 0, 4);
	return off;
}

static size_t bad_close_twice(struct bb *b)
{
	size_t off;

	hdr(b);
	close_rec(b, 20);
	off = close_rec(b, 30);
	return off;
}

static size_t bad_ts_zero(struct bb *b)
{
	size_t off;

	hdr(b);
	load(b, 10, 1, ADDR1, 1, "a", 0, 4);
	off = load(b, 0, 1, ADDR2, 2, "b", 0, 4);
	return off;
}

static size_t bad_ts_order(struct bb *b)
{
	size_t off;

	hdr(b);
	load(b, 10, 1, ADDR1, 1, "a", 0, 4);
	unwind(b, 30, 0);
	off = load(b, 29, 1, ADDR2, 2, "b", 0, 4);
	return off;
}

#define S JITRING_CHECK_SORTED
static const struct bad_case bad_cases[] = {
	{ "header-short", "39 bytes", 0, bad_header_short },
	{ "header-short", "empty file", 0, bad_header_empty },
	{ "header-magic", "byte-swapped magic", 0, bad_header_magic },
	{ "header-version", "version 2", 0, bad_header_version },
	{ "header-size", "total_size 48", 0, bad_header_size },
	{ "header-flags", "flags 3", 0, bad_header_flags },
	{ "record-size", "zero hole", 0, bad_record_hole },
	{ "record-size", "total_size 8", 0, bad_record_small },
	{ "record-id", "id 5", 0, bad_record_id },
	{ "record-bounds", "torn code", 0, bad_record_bounds },
	{ "record-bounds", "torn prefix", 0, bad_record_bounds_prefix },
	{ "trailing-garbage", "5 junk bytes", 0, bad_trailing_garbage },
	{ "trailing-garbage", "8-byte tail, size 12", 0,
	  bad_trailing_small_size },
	{ "load-size", "no room for a name", 0, bad_load_size },
	{ "load-code", "code_size 0", 0, bad_load_code_zero },
	{ "load-code", "code_size too big", 0, bad_load_code_big },
	{ "load-name", "no NUL", 0, bad_load_name },
	{ "load-name", "NUL inside the code", 0, bad_load_name_in_code },
	{ "move-size", "size 72", 0, bad_move_size },
	{ "debug-size", "size 24", 0, bad_debug_size },
	{ "debug-entries", "row overruns", 0, bad_debug_overrun },
	{ "debug-entries", "file without NUL", 0, bad_debug_nul },
	{ "unwind-size", "mapped_size too small", 0, bad_unwind_mapped },
	{ "unwind-size", "unwinding_size past payload", 0,
	  bad_unwind_payload },
	{ "unwind-size", "eh_frame not 4-aligned", 0, bad_unwind_align },
	{ "unwind-size", "record < 40", 0, bad_unwind_short },
	{ "unwind-hdr", "hdr size 16", 0, bad_unwind_hdr_size },
	{ "unwind-hdr", "eh_frame_ptr_enc", 0, bad_unwind_hdr_enc },
	{ "unwind-hdr", "fde_count 2", 0, bad_unwind_hdr_count },
	{ "unwind-hdr", "eh_frame_ptr off by 4", 0, bad_unwind_hdr_ptr },
	{ "group-orphan", "DEBUG_INFO then MOVE", 0, bad_group_orphan_move },
	{ "group-orphan", "UNWIND+DEBUG then CLOSE", 0,
	  bad_group_orphan_close },
	{ "group-orphan", "UNWIND then EOF", 0, bad_group_orphan_eof },
	{ "group-duplicate", "two UNWINDING_INFO", 0, bad_group_duplicate },
	{ "group-duplicate", "two DEBUG_INFO", 0, bad_group_duplicate_debug },
	{ "group-mismatch", "DEBUG_INFO for another address", 0,
	  bad_group_mismatch },
	{ "index-duplicate", "index 1 twice", 0, bad_index_duplicate },
	{ "index-duplicate", "index 0 twice", 0, bad_index_duplicate_zero },
	{ "move-unknown-index", "never loaded", 0, bad_move_unknown },
	{ "move-unknown-index", "loaded later", 0, bad_move_before_load },
	{ "close-not-last", "LOAD after CLOSE", 0, bad_close_not_last },
	{ "close-not-last", "two CLOSE", 0, bad_close_twice },
	{ "ts-zero", "ts 0", S, bad_ts_zero },
	{ "ts-order", "ts going back", S, bad_ts_order },
};
#undef S

static void test_corpus(void)
{
	const struct jitring_check_rule *rules;
	struct jitring_check_result res;
	size_t nrules, i, j, off;
	struct bb b = { 0 };
	int ret;

	for (i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
		const struct bad_case *c = &bad_cases[i];

		off = c->build(&b);
		ret = check_agrees(b.p, b.len, c->flags, &res);
		T_CHECK_EQ(ret, 1);
		if (ret != 1 || !res.rule || strcmp(res.rule, c->rule) ||
		    res.off != off) {
			t_failed++;
			fprintf(stderr,
				"case %s (%s): want %s @%zu, got %s @%llu: %s\n",
				c->rule, c->what, c->rule, off,
				res.rule ? res.rule : "(none)",
				(unsigned long long)res.off, res.detail);
		} else {
			t_passed++;
			T_CHECK(res.detail[0] != '\0');
		}
		bb_reset(&b);
	}

	/* Every rule has a corrupted file; names are unique. */
	rules = jitring_check_rules(&nrules);
	T_CHECK(nrules >= 24);
	for (j = 0; j < nrules; j++) {
		bool found = false;

		for (i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++)
			found |= strcmp(bad_cases[i].rule, rules[j].name) == 0;
		if (!found)
			fprintf(stderr, "rule %s has no test case\n",
				rules[j].name);
		T_CHECK(found);
		T_CHECK(rules[j].desc && rules[j].desc[0]);
		for (i = 0; i < j; i++)
			T_CHECK(strcmp(rules[i].name, rules[j].name) != 0);
	}

	/* ts rules only apply with JITRING_CHECK_SORTED. */
	bad_ts_zero(&b);
	T_CHECK_EQ(check_agrees(b.p, b.len, 0, &res), 0);
	bb_reset(&b);
	bad_ts_order(&b);
	T_CHECK_EQ(check_agrees(b.p, b.len, 0, &res), 0);
	bb_reset(&b);

	/* The reader alone reports single-record rules the same way. */
	{
		struct jitring_reader r;
		struct jitring_rd_record rec;

		off = bad_load_name(&b);
		T_REQUIRE(jitring_reader_init(&r, b.p, b.len, 0, NULL) == 0);
		T_CHECK_EQ(jitring_reader_next(&r, &rec), -EBADMSG);
		T_CHECK(r.rule && strcmp(r.rule, "load-name") == 0);
		T_CHECK_EQ(r.err_off, off);
		/* Sticky. */
		T_CHECK_EQ(jitring_reader_next(&r, &rec), -EBADMSG);
		bb_reset(&b);

		bad_header_magic(&b);
		T_CHECK_EQ(jitring_reader_init(&r, b.p, b.len, 0, NULL),
			   -EBADMSG);
		T_CHECK(r.rule && strcmp(r.rule, "header-magic") == 0);
		bb_reset(&b);
	}
}

static void test_acceptance(void)
{
	struct jitring_check_result res;
	struct jitring_reader r;
	struct jitring_rd_record rec;
	struct bb b = { 0 };
	size_t off, cut;

	/* Zero bytes up to EOF, short or long, are fine. */
	build_valid(&b, NULL);
	bb_zero(&b, 7);
	T_CHECK_EQ(check_agrees(b.p, b.len, 0, &res), 0);
	T_CHECK_EQ(res.zero_tail, 7);
	bb_zero(&b, 4089);
	T_CHECK_EQ(check_agrees(b.p, b.len, 0, &res), 0);
	T_CHECK_EQ(res.zero_tail, 4096);
	T_CHECK_EQ(res.records, 6);
	bb_reset(&b);

	/* A truncated last record: rejected by default, tolerated on
	 * request. */
	hdr(&b);
	load(&b, 10, 1, ADDR1, 1, "a", 0, 4);
	off = load(&b, 20, 1, ADDR2, 2, "b", 0, 100);
	/* (The first 4 bytes of a CODE_LOAD are zero: cut to those, the tail
	 * is a plain zero tail.) */
	for (cut = 1; cut <= 58 + 100 - 5; cut += 13) {
		size_t len = b.len - cut;

		T_CHECK_EQ(check_agrees(b.p, len, 0, &res), 1);
		T_CHECK(res.rule && strcmp(res.rule, "record-bounds") == 0);
		T_CHECK_EQ(res.off, off);
		T_CHECK_EQ(check_agrees(b.p, len,
					 JITRING_CHECK_ALLOW_TRUNCATED, &res),
			   0);
		T_CHECK_EQ(res.truncated, len - off);
		T_CHECK_EQ(res.records, 1);
	}
	/* The reader alone: the torn tail ends the file. */
	T_REQUIRE(jitring_reader_init(&r, b.p, b.len - 1,
				      JITRING_CHECK_ALLOW_TRUNCATED,
				      NULL) == 0);
	T_CHECK_EQ(jitring_reader_next(&r, &rec), 1);
	T_CHECK_EQ(jitring_reader_next(&r, &rec), 0);
	T_CHECK_EQ(r.truncated, b.len - 1 - off);
	bb_reset(&b);

	/* A group cut short by EOF is not an orphan when the tail is torn. */
	hdr(&b);
	unwind(&b, 10, 0);
	off = load(&b, 20, 1, ADDR1, 1, "a", 0, 4);
	b.len -= 2;
	T_CHECK_EQ(check_agrees(b.p, b.len, JITRING_CHECK_ALLOW_TRUNCATED,
				 &res), 0);
	T_CHECK_EQ(res.truncated, b.len - off);
	bb_reset(&b);

	/* CLOSE last, then zero bytes. */
	hdr(&b);
	load(&b, 10, 1, ADDR1, 1, "a", 0, 4);
	close_rec(&b, 20);
	T_CHECK_EQ(check_agrees(b.p, b.len, JITRING_CHECK_SORTED, &res), 0);
	T_CHECK_EQ(res.count[3], 1);
	bb_zero(&b, 64);
	T_CHECK_EQ(check_agrees(b.p, b.len, 0, &res), 0);
	bb_reset(&b);

	/* Groups in either order, with and without each part; equal
	 * timestamps are sorted. */
	hdr(&b);
	unwind(&b, 10, 0);
	debug(&b, 10, ADDR1, rows1, 3, 0);
	load(&b, 10, 1, ADDR1, 1, "a", 0, 4);
	debug(&b, 11, ADDR2, rows1, 0, 0);
	unwind(&b, 12, 3);
	load(&b, 13, 2, ADDR2, 2, "b", 0, 4);
	unwind(&b, 14, 0);
	load(&b, 15, 3, ADDR3, 3, "c", 0, 4);
	move(&b, 16, 3, ADDR3, ADDR1, 4, 3);
	T_CHECK_EQ(check_agrees(b.p, b.len, JITRING_CHECK_SORTED, &res), 0);
	T_CHECK_EQ(res.records, 9);
	T_CHECK_EQ(res.tids, 3);
	T_CHECK_EQ(res.ts_min, 10);
	T_CHECK_EQ(res.ts_max, 16);
	bb_reset(&b);

	/* ARCH_TIMESTAMP is a known flag. */
	hdr(&b);
	bb_set64(&b, 32, 1);
	load(&b, 10, 1, ADDR1, 1, "a", 0, 4);
	T_CHECK_EQ(check_agrees(b.p, b.len, 0, &res), 0);
	T_CHECK_EQ(res.header.flags, 1);
	bb_reset(&b);

	/* Line tables and the code they cover (warnings only). */
	{
		static const struct row to_end[] = {
			{ ADDR1, 10, 0, "a.js" },
			{ ADDR1 + 4, 42, 0, "a.js" },
			{ ADDR1 + 4, 42, 0, "a.js" }, /* = code_addr + 4 */
		};
		static const struct row past_end[] = {
			{ ADDR2, 10, 0, "a.js" },
			{ ADDR2 + 100, 11, 0, "a.js" },
		};

		hdr(&b);
		/* Ends exactly at the end of the 4-byte code: fine. */
		debug(&b, 10, ADDR1, to_end, 3, 0);
		load(&b, 10, 1, ADDR1, 1, "a", 0, 4);
		/* Past it: fine.  No rows: nothing to cover. */
		debug(&b, 11, ADDR2, past_end, 2, 0);
		load(&b, 11, 1, ADDR2, 2, "b", 0, 4);
		debug(&b, 12, ADDR3, past_end, 0, 0);
		load(&b, 12, 1, ADDR3, 3, "c", 0, 4);
		T_CHECK_EQ(check_agrees(b.p, b.len, 0, &res), 0);
		T_CHECK_EQ(res.lines_uncovered, 0);
		/* Ends at +4 of 5 bytes, twice: two warnings. */
		off = debug(&b, 13, ADDR1, to_end, 2, 0);
		load(&b, 13, 1, ADDR1, 4, "d", 0, 5);
		debug(&b, 14, ADDR1, to_end, 3, 0);
		load(&b, 14, 1, ADDR1, 5, "e", 0, 5);
		T_CHECK_EQ(check_agrees(b.p, b.len, JITRING_CHECK_SORTED,
					&res), 0);
		T_CHECK_EQ(res.lines_uncovered, 2);
		T_CHECK_EQ(res.lines_uncovered_off, off);
		bb_reset(&b);
	}

	/* Zero runs longer than any window: a tail, or a hole. */
	build_valid(&b, NULL);
	b.len -= 16; /* drop CLOSE */
	off = b.len;
	bb_zero(&b, 20000);
	T_CHECK_EQ(check_agrees(b.p, b.len, 0, &res), 0);
	T_CHECK_EQ(res.zero_tail, 20000);
	load(&b, 200, 1, ADDR3, 9, "late", 0, 4);
	T_CHECK_EQ(check_agrees(b.p, b.len, 0, &res), 1);
	T_CHECK(res.rule && strcmp(res.rule, "record-size") == 0);
	T_CHECK_EQ(res.off, off);
	b.len = off + 20000 + 6; /* a torn prefix after the run */
	T_CHECK_EQ(check_agrees(b.p, b.len, JITRING_CHECK_ALLOW_TRUNCATED,
				&res), 1);
	T_CHECK_EQ(res.off, off);
	bb_reset(&b);
}

/* What a stream refuses, and the window API's argument checks. */
static void test_stream_api(void)
{
	struct jitring_rd_stream st;
	struct jitring_rd_record rec;
	struct jitring_reader r;
	struct bb b = { 0 };
	int fd;

	T_CHECK_EQ(jitring_stream_open(NULL, 0, 0), -EINVAL);
	T_CHECK_EQ(jitring_stream_open(&st, -1, 0), -EINVAL);
	T_CHECK_EQ(jitring_stream_open(&st, 0, JITRING_CHECK_SORTED), -EINVAL);
	fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	T_REQUIRE(fd >= 0);
	T_CHECK_EQ(jitring_stream_open(&st, fd, 0), -ENODEV);
	close(fd);
	fd = open("/", O_RDONLY | O_CLOEXEC);
	T_REQUIRE(fd >= 0);
	T_CHECK_EQ(jitring_stream_open(&st, fd, 0), -EISDIR);
	close(fd);
	jitring_stream_close(NULL);

	build_valid(&b, NULL);
	/* Window mode needs the header in the first window. */
	T_CHECK_EQ(jitring_reader_init(&r, b.p, 39, JITRING_READER_WINDOW,
				       NULL), -EINVAL);
	T_REQUIRE(jitring_reader_init(&r, b.p, 60, JITRING_READER_WINDOW,
				      NULL) == 0);
	T_CHECK_EQ(jitring_reader_next(&r, &rec), JITRING_READER_MORE);
	T_CHECK_EQ(r.off, 40);
	T_CHECK(r.need > 20);
	T_CHECK_EQ(jitring_reader_feed(&r, b.p + 40, 19, false), -EINVAL);
	T_CHECK_EQ(jitring_reader_feed(&r, b.p + 40, b.len - 40, true), 0);
	T_CHECK_EQ(jitring_reader_next(&r, &rec), 1);
	T_CHECK_EQ(rec.off, 40);
	/* Not waiting for more any longer. */
	T_CHECK_EQ(jitring_reader_feed(&r, b.p, b.len, true), -EINVAL);

	/* A stream is checked once, from its start; flags must agree. */
	fd = stream_fd(b.p, b.len, false);
	T_REQUIRE(jitring_stream_open(&st, fd, 0) == 0);
	{
		struct jitring_check_result res;

		T_CHECK_EQ(jitring_check_stream(&st,
						JITRING_CHECK_ALLOW_TRUNCATED,
						&res), -EINVAL);
		T_CHECK_EQ(jitring_check_stream(&st, 0, NULL), -EINVAL);
		T_CHECK_EQ(jitring_stream_next(&st, &rec), 1);
		T_CHECK_EQ(jitring_check_stream(&st, 0, &res), -EINVAL);
	}
	jitring_stream_close(&st);
	close(fd);
	bb_reset(&b);
}

/* This thread's CPU time in seconds: load on the machine does not stretch
 * it, as it does the clock's. */
static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * The least CPU time of @tries jitring_check(@flags) runs on the first
 * @len bytes of @b, each of which must return @want; *@res is the last
 * run's.
 */
static double check_cpu(const struct bb *b, size_t len, unsigned int flags,
			int want, int tries, struct jitring_check_result *res)
{
	double best = 1e9;

	for (int i = 0; i < tries; i++) {
		double t0 = cpu_s(), dt;
		int ret = jitring_check(b->p, len, flags, res);

		dt = cpu_s() - t0;
		T_CHECK_EQ(ret, want);
		if (dt < best)
			best = dt;
	}
	return best;
}

/* The hash sets' lookups and probes so far (test builds count them). */
static void set_counts(uint64_t *lookups, uint64_t *probes)
{
#ifdef JITRING_TESTPOINTS
	*lookups =
		__atomic_load_n(&jitring_reader_set_lookups, __ATOMIC_RELAXED);
	*probes = __atomic_load_n(&jitring_reader_set_probes, __ATOMIC_RELAXED);
#else
	*lookups = *probes = 0;
#endif
}

/*
 * 200,000 loads (index @dense ? i : scattered), then a duplicate.  The
 * check must be linear: a load may cost at most SCALE_SLACK times what one
 * of the first N / SCALE_PART cost.  The larger sets' cache misses keep
 * it under 3; a set searched from end to end costs SCALE_PART times as
 * much per load for the indices, 16 times for the tids (100,000 against
 * 6,250).  Both are CPU times measured in the same run, so neither a slow
 * machine nor a busy one moves the outcome.  Test builds also count the
 * hash sets' probes: under 2 per lookup.
 */
#define SCALE_PART 32
#define SCALE_SLACK 6
static void scale_run(bool dense)
{
	enum { N = 200000, TIDS = 100000 };
	struct jitring_check_result res;
	struct bb b = { 0 };
	uint64_t index, dup = 0;
	uint64_t l0, p0, l, p;
	double part, all, per;
	size_t off, part_len = 0;
	uint32_t i;

	hdr(&b);
	for (i = 0; i < N; i++) {
		index = dense ? i : (i + 1) * 0x9E3779B97F4A7C15ull;
		if (i == N / 2)
			dup = index;
		if (i == N / SCALE_PART)
			part_len = b.len;
		load(&b, 1000 + i, 1 + i % TIDS, ADDR1 + 64ull * i, index, "f",
		     0, 1);
	}
	part = check_cpu(&b, part_len, JITRING_CHECK_SORTED, 0, 5, &res);
	T_CHECK_EQ(res.records, N / SCALE_PART);
	set_counts(&l0, &p0);
	all = check_cpu(&b, b.len, JITRING_CHECK_SORTED, 0, 2, &res);
	set_counts(&l, &p);
	per = all / N / (part / (N / SCALE_PART));
	printf("scale: %d %s loads checked in %.3f s of CPU time; a load "
	       "cost %.2f times what one of the first %d did\n",
	       N, dense ? "dense" : "scattered", all, per, N / SCALE_PART);
	T_CHECK(per <= SCALE_SLACK);
	T_CHECK_EQ(res.records, N);
	T_CHECK_EQ(res.tids, TIDS);
	T_CHECK_EQ(res.pids, 1);
#ifdef JITRING_TESTPOINTS
	printf("scale: %.3f probes per set lookup\n",
	       l > l0 ? (double)(p - p0) / (double)(l - l0) : 0.0);
	/* Linear probing at load <= 1/2 expects < 1.5. */
	T_CHECK(l - l0 >= N && p - p0 < 2 * (l - l0));
#endif

	move(&b, 1000 + N, 1, ADDR1, ADDR2, 1, dup);
	off = load(&b, 1000 + N, 1, ADDR1, dup, "dup", 0, 1);
	/* The same walk as the clean check, to its last record. */
	T_CHECK(check_cpu(&b, b.len, 0, 1, 2, &res) <= 2 * all);
	T_CHECK(res.rule && strcmp(res.rule, "index-duplicate") == 0);
	T_CHECK_EQ(res.off, off);
	T_CHECK_EQ(res.records, N + 1);
	bb_reset(&b);
}

static void test_scale(void)
{
	struct jitring_check_result res;
	struct bb b = { 0 };
	size_t off;
	uint32_t i;

	scale_run(true);
	scale_run(false);

	/* An index first seen far above the others, then inside the range
	 * the dense ones grew into, is still known. */
	hdr(&b);
	load(&b, 1, 1, ADDR1, 300000, "far", 0, 1);
	for (i = 0; i < 5000; i++)
		load(&b, 2, 1, ADDR1, i, "f", 0, 1);
	load(&b, 3, 1, ADDR1, 300001, "near", 0, 1);
	move(&b, 4, 1, ADDR1, ADDR2, 1, 300000);
	move(&b, 4, 1, ADDR1, ADDR2, 1, 300001);
	T_CHECK_EQ(check_agrees(b.p, b.len, 0, &res), 0);
	move(&b, 5, 1, ADDR1, ADDR2, 1, 300002);
	T_CHECK_EQ(check_agrees(b.p, b.len, 0, &res), 1);
	T_CHECK(res.rule && strcmp(res.rule, "move-unknown-index") == 0);
	b.len -= 64;
	off = load(&b, 6, 1, ADDR1, 300000, "again", 0, 1);
	T_CHECK_EQ(check_agrees(b.p, b.len, 0, &res), 1);
	T_CHECK(res.rule && strcmp(res.rule, "index-duplicate") == 0);
	T_CHECK_EQ(res.off, off);
	T_CHECK(strstr(res.detail, "already loaded at offset 40") != NULL);
	bb_reset(&b);
}

static char tmpdir[64];

static void write_file(const char *path, const struct bb *b)
{
	FILE *f = fopen(path, "wb");

	T_REQUIRE(f);
	T_REQUIRE(b->len == 0 || fwrite(b->p, 1, b->len, f) == b->len);
	T_REQUIRE(fclose(f) == 0);
}

/* Run @cmd; return its exit code and its stdout+stderr in @out. */
static int run(const char *cmd, char *out, size_t size)
{
	char full[1024];
	size_t n = 0, k;
	FILE *p;
	int st;

	snprintf(full, sizeof(full), "%s 2>&1", cmd);
	p = popen(full, "r");
	T_REQUIRE(p);
	while (n + 1 < size && (k = fread(out + n, 1, size - 1 - n, p)) > 0)
		n += k;
	out[n] = '\0';
	while (fgetc(p) != EOF)
		;
	st = pclose(p);
	if (st == -1 || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

static size_t count_lines(const char *s, bool json)
{
	size_t n = 0;
	const char *nl;

	while ((nl = strchr(s, '\n'))) {
		if (json) {
			T_CHECK(s[0] == '{' && nl[-1] == '}');
		}
		n++;
		s = nl + 1;
	}
	return n;
}

static void test_cli(void)
{
	const char *root = getenv("JITRING_BUILD_ROOT");
	char tool[512], good[128], bad[128], empty[128], cmd[1024];
	static char out[1 << 16];
	struct bb b = { 0 };
	size_t off;
	char want[128];
	int rc;

	if (!root || !root[0]) {
		printf("SKIP cli: JITRING_BUILD_ROOT not set\n");
		return;
	}
	snprintf(tool, sizeof(tool), "%s/tools/jitring-dump", root);
	T_REQUIRE(access(tool, X_OK) == 0);
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/jitring-reader-XXXXXX");
	T_REQUIRE(mkdtemp(tmpdir));
	snprintf(good, sizeof(good), "%s/good.dump", tmpdir);
	snprintf(bad, sizeof(bad), "%s/bad.dump", tmpdir);
	snprintf(empty, sizeof(empty), "%s/empty.dump", tmpdir);

	/* A valid file with a name that needs JSON escaping. */
	build_valid(&b, NULL);
	b.len -= 16; /* drop CLOSE */
	load(&b, 160, 7, ADDR3 + 4096, 3, "q\"\\\x01\xc3\xa9\xff", 0, 4);
	close_rec(&b, 170);
	write_file(good, &b);
	bb_reset(&b);
	off = bad_index_duplicate(&b);
	write_file(bad, &b);
	bb_reset(&b);
	write_file(empty, &b);

	snprintf(cmd, sizeof(cmd), "'%s' --check '%s'", tool, bad);
	rc = run(cmd, out, sizeof(out));
	T_CHECK_EQ(rc, 1);
	snprintf(want, sizeof(want), ": offset %zu: rule index-duplicate: ",
		 off);
	T_CHECK(strstr(out, want) != NULL);
	T_CHECK(strncmp(out, bad, strlen(bad)) == 0);

	snprintf(cmd, sizeof(cmd), "'%s' --check --json '%s'", tool, bad);
	rc = run(cmd, out, sizeof(out));
	T_CHECK_EQ(rc, 1);
	T_CHECK(strstr(out, "\"rule\":\"index-duplicate\"") != NULL);
	T_CHECK(strstr(out, "\"valid\":false") != NULL);

	snprintf(cmd, sizeof(cmd), "'%s' --check --sorted '%s'", tool, good);
	rc = run(cmd, out, sizeof(out));
	T_CHECK_EQ(rc, 0);
	T_CHECK(strstr(out, ": ok: 7 records, 1 pids, 3 tids, span 70 ns") !=
		NULL);
	if (rc)
		fprintf(stderr, "%s", out);

	/* The reference file's table leaves fn_one's end uncovered. */
	T_CHECK(strstr(out, "warning: 1 DEBUG_INFO line table(s) end before "
			    "their code does (first at offset ") != NULL);

	snprintf(cmd, sizeof(cmd), "'%s' --check --json '%s'", tool, good);
	rc = run(cmd, out, sizeof(out));
	T_CHECK_EQ(rc, 0);
	T_CHECK(strstr(out, "\"valid\":true,\"records\":7") != NULL);
	T_CHECK(strstr(out, "\"lines_uncovered\":1}") != NULL);
	T_CHECK_EQ(count_lines(out, true), 1);

	snprintf(cmd, sizeof(cmd), "'%s' --json '%s'", tool, good);
	rc = run(cmd, out, sizeof(out));
	T_CHECK_EQ(rc, 0);
	T_CHECK_EQ(count_lines(out, true), 7);
	T_CHECK(strstr(out, "\"name\":\"q\\\"\\\\\\u0001\xc3\xa9\\u00ff\"") !=
		NULL);
	T_CHECK(strstr(out, "\"type\":\"CODE_MOVE\"") != NULL);
	T_CHECK(strstr(out, "\"name\":\"fn_one\"") != NULL);

	snprintf(cmd, sizeof(cmd), "'%s' '%s'", tool, good);
	rc = run(cmd, out, sizeof(out));
	T_CHECK_EQ(rc, 0);
	T_CHECK_EQ(count_lines(out, false), 7);
	T_CHECK(strstr(out, "CODE_LOAD") && strstr(out, "name=fn_two"));

	/* Dumping a corrupt file prints what precedes the violation. */
	snprintf(cmd, sizeof(cmd), "'%s' '%s'", tool, bad);
	rc = run(cmd, out, sizeof(out));
	T_CHECK_EQ(rc, 0); /* the dump itself is fine: no per-record rule */

	snprintf(cmd, sizeof(cmd), "'%s' --check '%s'", tool, empty);
	rc = run(cmd, out, sizeof(out));
	T_CHECK_EQ(rc, 1);
	T_CHECK(strstr(out, "rule header-short") != NULL);

	snprintf(cmd, sizeof(cmd), "'%s' --check '%s/missing.dump'", tool,
		 tmpdir);
	T_CHECK_EQ(run(cmd, out, sizeof(out)), 2);
	snprintf(cmd, sizeof(cmd), "'%s' --bogus '%s'", tool, good);
	T_CHECK_EQ(run(cmd, out, sizeof(out)), 2);
	snprintf(cmd, sizeof(cmd), "'%s'", tool);
	T_CHECK_EQ(run(cmd, out, sizeof(out)), 2);
	snprintf(cmd, sizeof(cmd), "'%s' --help", tool);
	T_CHECK_EQ(run(cmd, out, sizeof(out)), 0);
	T_CHECK(strstr(out, "group-orphan") != NULL);

	unlink(good);
	unlink(bad);
	unlink(empty);
	rmdir(tmpdir);
}

int main(void)
{
	test_round_trip();
	test_summary();
	test_corpus();
	test_acceptance();
	test_stream_api();
	test_scale();
	test_cli();
	return t_report();
}
