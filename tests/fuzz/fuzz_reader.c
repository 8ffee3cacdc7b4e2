/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for the independent reader (src/reader/reader.h).
 *
 * The input is a jitdump image, copied into a buffer of exactly its size
 * (so ASan sees any read past the end).  It goes through:
 *  - jitring_check() with each flag combination (0, SORTED,
 *    ALLOW_TRUNCATED, both) and with an unknown flag (-EINVAL);
 *  - the record-by-record reader with and without ALLOW_TRUNCATED, every
 *    record's fields touched (name, code, line rows and their file names,
 *    unwinding payload), each checked to lie inside the record.
 * Besides "no crash, no out-of-bounds read", the results must agree:
 *  - jitring_check() returns 0, 1 or -ENOMEM, nothing else;
 *  - a file valid with SORTED is valid without it; one valid without
 *    ALLOW_TRUNCATED is valid with it (the flags only relax or add rules);
 *  - a valid file has count[] summing to records, file_size == len, and
 *    truncated bytes only with ALLOW_TRUNCATED;
 *  - if jitring_check() accepts the file, the reader (same truncation flag)
 *    walks it to the end without a violation and sees the same number of
 *    records; if the reader finds a violation, jitring_check() does too;
 *  - a reader error is sticky;
 *  - the reader in window mode, fed windows of a few bytes (each an
 *    exact-size copy, so ASan sees any read past a window), returns the
 *    same records, end, rule and offsets as over the whole buffer.
 * A broken invariant aborts, which libFuzzer reports as a crash.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reader/reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(...)                                                           \
	do {                                                                \
		fprintf(stderr, "fuzz_reader: " __VA_ARGS__);               \
		fputc('\n', stderr);                                        \
		abort();                                                    \
	} while (0)

/* Keeps the touched bytes alive so the reads are not optimised away. */
static volatile unsigned sink;

static void in_record(const struct jitring_rd_record *rec, const void *p,
		      uint64_t len, const char *what)
{
	const unsigned char *b = p, *lo = rec->raw, *hi = rec->raw + rec->size;

	if (b < lo || b > hi || len > (uint64_t)(hi - b))
		FAIL("%s of the %s at %zu lies outside the record", what,
		     jitring_reader_type_name(rec->id), rec->off);
}

static void touch(const void *p, size_t len)
{
	const unsigned char *b = p;
	unsigned s = 0;

	for (size_t i = 0; i < len; i++)
		s += b[i];
	sink += s;
}

/* Walk every record; returns the reader's final state (0 or -EBADMSG). */
static int walk(const uint8_t *buf, size_t len, unsigned flags,
		uint64_t *records)
{
	struct jitring_reader r;
	struct jitring_rd_record rec;
	struct jitring_rd_header h;
	int ret;

	*records = 0;
	ret = jitring_reader_init(&r, buf, len, flags, &h);
	if (ret == -EBADMSG) {
		if (!r.rule)
			FAIL("header violation without a rule");
		return ret;
	}
	if (ret)
		FAIL("jitring_reader_init: %d", ret);
	while ((ret = jitring_reader_next(&r, &rec)) == 1) {
		(*records)++;
		if (rec.off + rec.size > len || rec.raw != buf + rec.off ||
		    rec.size < 16)
			FAIL("record at %zu of %u bytes in %zu", rec.off,
			     rec.size, len);
		touch(rec.raw, rec.size);
		if (!jitring_reader_type_name(rec.id))
			FAIL("no type name");
		switch (rec.id) {
		case JITRING_RD_CODE_LOAD:
			in_record(&rec, rec.name, rec.name_len + 1, "name");
			if (strlen(rec.name) != rec.name_len)
				FAIL("name_len %zu, strlen %zu", rec.name_len,
				     strlen(rec.name));
			in_record(&rec, rec.code, rec.code_size, "code");
			/* perf reads the code as the record's last bytes. */
			if (rec.code + rec.code_size != rec.raw + rec.size)
				FAIL("code does not end the CODE_LOAD");
			touch(rec.code, (size_t)rec.code_size);
			break;
		case JITRING_RD_CODE_DEBUG_INFO: {
			struct jitring_rd_line ln;
			size_t cur = 0;
			uint64_t rows = 0;
			int lr;

			while ((lr = jitring_reader_line(&rec, &cur, &ln)) ==
			       1) {
				size_t fl = strlen(ln.file);

				in_record(&rec, ln.file, fl + 1, "file name");
				touch(ln.file, fl);
				if (++rows > rec.nr_entry)
					FAIL("more rows than nr_entry");
			}
			if (lr != 0 || rows != rec.nr_entry)
				FAIL("DEBUG_INFO rows: %d after %llu of %llu",
				     lr, (unsigned long long)rows,
				     (unsigned long long)rec.nr_entry);
			if (rec.entries_end > rec.size)
				FAIL("entries_end past the record");
			break;
		}
		case JITRING_RD_CODE_UNWINDING_INFO:
			in_record(&rec, rec.unwind, rec.unwinding_size,
				  "unwinding data");
			if (rec.eh_frame_size + rec.eh_frame_hdr_size !=
			    rec.unwinding_size)
				FAIL("eh_frame_size");
			touch(rec.unwind, (size_t)rec.unwinding_size);
			break;
		default:
			break;
		}
	}
	if (ret == -EBADMSG) {
		if (!r.rule)
			FAIL("record violation without a rule");
		/* Sticky. */
		if (jitring_reader_next(&r, &rec) != -EBADMSG)
			FAIL("reader error not sticky");
		return ret;
	}
	if (ret != 0)
		FAIL("jitring_reader_next: %d", ret);
	if (jitring_reader_next(&r, &rec) != 0)
		FAIL("reader end not sticky");
	if (r.truncated && !(flags & JITRING_CHECK_ALLOW_TRUNCATED))
		FAIL("truncated tail without ALLOW_TRUNCATED");
	return 0;
}

/* A copy of @len bytes at @p in a buffer of exactly that size. */
static uint8_t *window_copy(const uint8_t *p, size_t len)
{
	uint8_t *w = malloc(len ? len : 1);

	if (!w)
		abort();
	memcpy(w, p, len);
	return w;
}

/*
 * Walk @buf whole and in windows growing by @step bytes; everything the
 * two readers report must agree.
 */
static void windowed(const uint8_t *buf, size_t len, unsigned flags,
		     size_t step)
{
	struct jitring_reader r, w;
	struct jitring_rd_record a, b;
	size_t first = len < 40 + step ? len : 40 + step;
	uint8_t *win;
	int ra, rw;

	if (first < 40)
		return; /* window mode needs the header in one piece */
	win = window_copy(buf, first);
	ra = jitring_reader_init(&r, buf, len, flags, NULL);
	rw = jitring_reader_init(&w, win, first,
				 flags | (first < len ? JITRING_READER_WINDOW :
							0),
				 NULL);
	if (ra != rw)
		FAIL("window init %d, whole %d", rw, ra);
	if (ra != 0) {
		free(win);
		return; /* a header violation, compared above */
	}
	do {
		ra = jitring_reader_next(&r, &a);
		while ((rw = jitring_reader_next(&w, &b)) ==
		       JITRING_READER_MORE) {
			size_t from = (size_t)w.base + w.off;
			size_t keep = w.len - w.off;
			size_t n = keep + step;
			uint8_t *next;

			if (w.need == 0 || from + keep > len)
				FAIL("MORE with need %zu at %zu", w.need, from);
			if (n > len - from)
				n = len - from;
			next = window_copy(buf + from, n);
			if (jitring_reader_feed(&w, next, n, from + n == len))
				FAIL("feed refused");
			free(win);
			win = next;
		}
		if (ra != rw)
			FAIL("window next %d, whole %d", rw, ra);
		if (ra == 1 && (a.off != b.off || a.id != b.id ||
				a.size != b.size ||
				memcmp(a.raw, b.raw, a.size) ||
				a.code_index != b.code_index ||
				a.nr_entry != b.nr_entry))
			FAIL("window record at %zu differs", a.off);
	} while (ra == 1);
	if (ra == -EBADMSG &&
	    (strcmp(r.rule, w.rule) || r.err_off != w.err_off))
		FAIL("window rule %s at %zu, whole %s at %zu", w.rule,
		     w.err_off, r.rule, r.err_off);
	if (r.zero_tail != w.zero_tail || r.truncated != w.truncated)
		FAIL("window tail %zu/%zu, whole %zu/%zu", w.zero_tail,
		     w.truncated, r.zero_tail, r.truncated);
	free(win);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const unsigned fl[4] = {
		0, JITRING_CHECK_SORTED, JITRING_CHECK_ALLOW_TRUNCATED,
		JITRING_CHECK_SORTED | JITRING_CHECK_ALLOW_TRUNCATED,
	};
	struct jitring_check_result res[4], bad;
	uint8_t *buf = malloc(size ? size : 1);
	int r[4];

	if (!buf)
		return 0;
	memcpy(buf, data, size);

	for (int i = 0; i < 4; i++) {
		uint64_t sum = 0;

		r[i] = jitring_check(buf, size, fl[i], &res[i]);
		if (r[i] == -ENOMEM)
			goto out;
		if (r[i] != 0 && r[i] != 1)
			FAIL("jitring_check(flags %u) returned %d", fl[i],
			     r[i]);
		if (r[i] == 1 && !res[i].rule)
			FAIL("violation without a rule");
		if (r[i] != 0)
			continue;
		for (unsigned k = 0; k < JITRING_RD_NR_IDS; k++)
			sum += res[i].count[k];
		if (sum != res[i].records || res[i].file_size != size ||
		    res[i].rule)
			FAIL("summary of a valid file (flags %u)", fl[i]);
		if (res[i].truncated &&
		    !(fl[i] & JITRING_CHECK_ALLOW_TRUNCATED))
			FAIL("truncated without ALLOW_TRUNCATED");
	}
	if (jitring_check(buf, size, 1u << 7, &bad) != -EINVAL)
		FAIL("unknown flag accepted");
	/* SORTED only adds a rule; ALLOW_TRUNCATED only relaxes one. */
	if (!r[1] && r[0])
		FAIL("valid with SORTED, invalid without");
	if (!r[3] && r[2])
		FAIL("valid with SORTED|TRUNCATED, invalid with TRUNCATED");
	if (!r[0] && r[2])
		FAIL("valid, but invalid with ALLOW_TRUNCATED");
	if (!r[1] && r[3])
		FAIL("valid with SORTED, invalid with SORTED|TRUNCATED");

	for (int t = 0; t < 2; t++) {
		unsigned rf = t ? JITRING_CHECK_ALLOW_TRUNCATED : 0;
		int ci = t ? 2 : 0;
		uint64_t n;
		int w = walk(buf, size, rf, &n);

		/* The reader's rules are a subset of jitring_check()'s. */
		if (w != 0 && r[ci] == 0)
			FAIL("jitring_check accepts what the reader refuses "
			     "(flags %u)", rf);
		if (r[ci] == 0 && n != res[ci].records)
			FAIL("reader saw %llu records, jitring_check %llu",
			     (unsigned long long)n,
			     (unsigned long long)res[ci].records);
	}
	/* Windows of 1 byte and of a size the input picks. */
	for (int t = 0; t < 2; t++) {
		unsigned rf = t ? JITRING_CHECK_ALLOW_TRUNCATED : 0;

		windowed(buf, size, rf, 1);
		windowed(buf, size, rf, size ? 1 + buf[size - 1] % 61 : 7);
	}
out:
	free(buf);
	return 0;
}
