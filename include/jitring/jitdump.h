/* SPDX-License-Identifier: MIT */
/*
 * The perf jitdump file format (tools/perf/Documentation/
 * jitdump-specification.txt, version 1) as jitring writes it.  All fields
 * are in host byte order; records are packed with no alignment.
 * docs/format.md describes every field and perf's placement rules.
 */
#ifndef JITRING_JITDUMP_H
#define JITRING_JITDUMP_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define JITDUMP_MAGIC 0x4A695444u /* "JiTD" read as a little-endian u32 */
#define JITDUMP_VERSION 1u
/** Header flag: timestamps are TSC ticks, not CLOCK_MONOTONIC. */
#define JITDUMP_FLAGS_ARCH_TIMESTAMP (1ull << 0)

enum jitdump_record_id {
	JIT_CODE_LOAD = 0,
	JIT_CODE_MOVE = 1,
	JIT_CODE_DEBUG_INFO = 2,
	JIT_CODE_CLOSE = 3,
	JIT_CODE_UNWINDING_INFO = 4,
	JIT_CODE_MAX,
};

struct jitdump_header {
	uint32_t magic;
	uint32_t version;
	uint32_t total_size;
	uint32_t elf_mach;
	uint32_t pad1;
	uint32_t pid;
	uint64_t timestamp;
	uint64_t flags;
};

struct jitdump_prefix {
	uint32_t id;
	uint32_t total_size; /* whole record, prefix included */
	uint64_t timestamp;
};

/* Followed by the NUL-terminated name, then code_size bytes of code, which
 * must be the last bytes of the record. */
struct jitdump_code_load {
	struct jitdump_prefix p;
	uint32_t pid;
	uint32_t tid;
	uint64_t vma;
	uint64_t code_addr;
	uint64_t code_size;
	uint64_t code_index;
};

struct jitdump_code_move {
	struct jitdump_prefix p;
	uint32_t pid;
	uint32_t tid;
	uint64_t vma;
	uint64_t old_code_addr;
	uint64_t new_code_addr;
	uint64_t code_size;
	uint64_t code_index;
};

/* One line-table row; followed by its NUL-terminated file name. */
struct jitdump_debug_entry {
	uint64_t addr;
	int32_t lineno;
	int32_t discrim;
};

/* Followed by nr_entry rows. */
struct jitdump_code_debug_info {
	struct jitdump_prefix p;
	uint64_t code_addr;
	uint64_t nr_entry;
};

/* Followed by [.eh_frame][.eh_frame_hdr][padding]: unwinding_size covers the
 * first two, eh_frame_hdr_size the second; mapped_size extends perf's
 * mapping of the code to cover the data. */
struct jitdump_code_unwinding_info {
	struct jitdump_prefix p;
	uint64_t unwinding_size;
	uint64_t eh_frame_hdr_size;
	uint64_t mapped_size;
};

/* The 20-byte .eh_frame_hdr with one table row (perf's genelf.c layout). */
struct jitdump_eh_frame_hdr {
	uint8_t version;          /* 1 */
	uint8_t eh_frame_ptr_enc; /* DW_EH_PE_pcrel | DW_EH_PE_sdata4 */
	uint8_t fde_count_enc;    /* DW_EH_PE_udata4 */
	uint8_t table_enc;        /* DW_EH_PE_datarel | DW_EH_PE_sdata4 */
	int32_t eh_frame_ptr;     /* .eh_frame relative to this field */
	uint32_t fde_count;       /* 1 */
	int32_t initial_loc;      /* code start relative to the hdr */
	int32_t fde;              /* the FDE relative to the hdr */
};

#define JITDUMP_ASSERT_SIZE(t, n) _Static_assert(sizeof(t) == (n), #t " size")
#ifndef __cplusplus
JITDUMP_ASSERT_SIZE(struct jitdump_header, 40);
JITDUMP_ASSERT_SIZE(struct jitdump_prefix, 16);
JITDUMP_ASSERT_SIZE(struct jitdump_code_load, 56);
JITDUMP_ASSERT_SIZE(struct jitdump_code_move, 64);
JITDUMP_ASSERT_SIZE(struct jitdump_debug_entry, 16);
JITDUMP_ASSERT_SIZE(struct jitdump_code_debug_info, 32);
JITDUMP_ASSERT_SIZE(struct jitdump_code_unwinding_info, 40);
JITDUMP_ASSERT_SIZE(struct jitdump_eh_frame_hdr, 20);
#endif

#ifdef __cplusplus
}
#endif

#endif /* JITRING_JITDUMP_H */
