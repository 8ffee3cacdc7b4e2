/* SPDX-License-Identifier: MIT */
/*
 * The text perf map, /tmp/perf-<pid>.map: one "<hex addr> <hex size>
 * <name>" line per CODE_LOAD, written by whoever writes the dump (the
 * rings flusher, or the mutex engine under its lock), in the same order.
 * Useful where `perf inject --jit` is too slow for hundreds of thousands of
 * functions; perf reads it without inject.
 */
#ifndef JITRING_SRC_PERFMAP_H
#define JITRING_SRC_PERFMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct jitring;

/* Longest line: two 16-digit numbers, spaces, the name, the newline. */
#define JR_PERFMAP_LINE_MAX (40 + 4096)

/**
 * jitring_perfmap_line() - Format one line; control characters in @name
 * (newlines included) become '?' so a line can never be split or forged.
 * Return: bytes written to @buf (no NUL), at most JR_PERFMAP_LINE_MAX.
 */
size_t jitring_perfmap_line(char *buf, uint64_t addr, uint64_t size,
			    const char *name, size_t name_len);

/**
 * jitring_perfmap_line_load() - Format the line of an encoded CODE_LOAD.
 * @buf: JR_PERFMAP_LINE_MAX bytes.
 * @group: an encoded group whose last record is a CODE_LOAD (or a MOVE,
 *	for which nothing is formatted: a perf map has no moves).
 * @len: bytes of the group.
 * Return: bytes written, 0 for a MOVE.
 */
size_t jitring_perfmap_line_load(char *buf, const uint8_t *group, size_t len);

/**
 * jitring_perfmap_open() - Get /tmp/perf-<pid>.map (JITRING_F_PERF_MAP).
 * @child: from the fork child handler (see jitring_file_claim()).
 * @from: receives the closed writer whose map this continues, or NULL.
 *
 * Goes through jitring_file_claim() whether or not a closed writer of this
 * process left a map: never follows, opens or appends to a file someone
 * planted there, never blocks on a FIFO.
 * Return: 0; -EEXIST; -ENOMEM; or -errno.
 */
int jitring_perfmap_open(struct jitring *jr, bool child, struct jitring **from);
/* Undo jitring_perfmap_open() after a later failure of jitring_open(). */
void jitring_perfmap_abandon(struct jitring *jr, struct jitring *from);
/* Append @len bytes; a failure is logged and stops the map, never the dump. */
void jitring_perfmap_write(struct jitring *jr, const char *buf, size_t len);
/* Stop writing lines (close); the file stays held. */
void jitring_perfmap_close(struct jitring *jr);

#endif /* JITRING_SRC_PERFMAP_H */
