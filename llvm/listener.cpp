// SPDX-License-Identifier: MIT
//
// The jitring LLVM listener: one [UNWINDING_INFO][DEBUG_INFO]CODE_LOAD
// group per function of each object RuntimeDyld loads.
//
// Where each piece comes from:
//  - name, address, size: the object's symbol table (computeSymbolSizes),
//    addresses from the LoadedObjectInfo's section load addresses, or from
//    the debug object (getObjectForDebug, whose sections carry their load
//    addresses) when the object has a line table.
//  - unwinding: the object's .eh_frame as RuntimeDyld loaded it in
//    memory, each FDE's pc_begin taken from the object's relocation of
//    that field (the load address of the symbol it names, plus the
//    addend): ORC calls listeners once the object is relocated, but MCJIT
//    calls them before RuntimeDyld::resolveRelocations(), when every
//    pc_begin in memory still holds the unrelocated field.  The
//    relocations give the same address in both.  Only pc_begin is
//    relocated: the CIE and FDE are final as loaded.  jitring takes one CIE
//    with augmentation "zR" and one FDE with pcrel|sdata4 pointers, so
//    each function's CIE and FDE are re-encoded in that form: the call
//    frame instructions are copied as they are (LLVM emits no
//    DW_CFA_set_loc, the only instruction that carries an encoded
//    pointer); the personality and LSDA are left out (perf unwinds, it
//    does not catch exceptions).
//  - lines: DWARFContext over the debug object, as LLVM's own perf
//    listener does, only when the object has .debug_line.
//
// The listener keeps no state per object and takes no lock of its own: all is
// built on the calling thread's stack and heap and handed to
// jitring_write(), which copies it into the thread's ring.  Several
// threads may notify at once (an ORC JIT with several compile threads, or
// one RuntimeDyld per thread).

#include "jitring-llvm.h"

#include <llvm/ADT/SmallVector.h>
#include <llvm/DebugInfo/DWARF/DWARFContext.h>
#include <llvm/ExecutionEngine/JITEventListener.h>
#include <llvm/ExecutionEngine/RuntimeDyld.h>
#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Object/SymbolSize.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

using namespace llvm;

namespace {

constexpr uint32_t kLen64 = 0xffffffffu;
constexpr uint8_t kPeOmit = 0xff;

struct Fde {
	uint64_t pc;
	uint64_t range;
	const uint8_t *cie; // at its length field
	const uint8_t *fde; // at its length field
};

uint32_t rd32(const uint8_t *p)
{
	uint32_t v;
	std::memcpy(&v, p, 4);
	return v;
}

bool leb(const uint8_t *&p, const uint8_t *end, uint64_t &v, bool sign)
{
	unsigned shift = 0;
	v = 0;
	while (p < end) {
		uint8_t b = *p++;
		if (shift < 64)
			v |= uint64_t(b & 0x7f) << shift;
		shift += 7;
		if (!(b & 0x80)) {
			if (sign && shift < 64 && (b & 0x40))
				v |= ~uint64_t(0) << shift;
			return true;
		}
	}
	return false;
}

// Reads a DW_EH_PE-encoded pointer at p; pcrel is applied against the
// field's own (run-time) address.  Only what LLVM emits: absptr, u/sdata
// 2/4/8, optionally pcrel.
bool read_ptr(const uint8_t *&p, const uint8_t *end, uint8_t enc,
	      bool apply, uint64_t &v)
{
	const uint8_t *field = p;
	unsigned n;
	bool sign = false;
	switch (enc & 0x0f) {
	case 0x00: n = 8; break;
	case 0x02: n = 2; break;
	case 0x03: n = 4; break;
	case 0x04: n = 8; break;
	case 0x0a: n = 2; sign = true; break;
	case 0x0b: n = 4; sign = true; break;
	case 0x0c: n = 8; sign = true; break;
	default: return false;
	}
	if (end - p < n)
		return false;
	uint64_t x = 0;
	std::memcpy(&x, p, n);
	if (sign && n < 8 && (x >> (n * 8 - 1)) & 1)
		x |= ~uint64_t(0) << (n * 8);
	p += n;
	if (apply) {
		switch (enc & 0x70) {
		case 0x00: break;
		case 0x10: x += reinterpret_cast<uintptr_t>(field); break;
		default: return false;
		}
	}
	v = x;
	return true;
}

// What the re-encoder needs of a CIE.
struct Cie {
	uint8_t version;
	uint64_t code_align;
	uint64_t data_align; // signed, as read
	uint64_t ra;
	uint8_t fde_enc = 0; // absptr unless 'R' says otherwise
	bool has_z = false;
	const uint8_t *insns;
	const uint8_t *end;
};

bool parse_cie(const uint8_t *c, Cie &cie)
{
	uint32_t len = rd32(c);
	if (len == kLen64 || len < 8 || rd32(c + 4) != 0)
		return false;
	const uint8_t *end = c + 4 + len, *p = c + 8;
	cie.version = *p++;
	if (cie.version != 1 && cie.version != 3)
		return false;
	const char *aug = reinterpret_cast<const char *>(p);
	size_t aug_len = strnlen(aug, end - p);
	if (p + aug_len >= end)
		return false;
	p += aug_len + 1;
	if (!leb(p, end, cie.code_align, false) ||
	    !leb(p, end, cie.data_align, true))
		return false;
	if (cie.version == 1) {
		if (p >= end)
			return false;
		cie.ra = *p++;
	} else if (!leb(p, end, cie.ra, false)) {
		return false;
	}
	if (aug[0] == 'z') {
		uint64_t n;
		cie.has_z = true;
		if (!leb(p, end, n, false) || n > uint64_t(end - p))
			return false;
		const uint8_t *d = p, *dend = p + n;
		for (const char *a = aug + 1; *a; a++) {
			if (*a == 'R') {
				if (d >= dend)
					return false;
				cie.fde_enc = *d++;
			} else if (*a == 'P') {
				uint64_t dummy;
				if (d >= dend)
					return false;
				uint8_t penc = *d++;
				if (!read_ptr(d, dend, penc, false, dummy))
					return false;
			} else if (*a == 'L') {
				if (d >= dend)
					return false;
				d++;
			} else if (*a != 'S') {
				return false;
			}
		}
		p = dend;
	} else if (aug[0]) {
		return false; // "eh" and other pre-'z' forms: not from LLVM
	}
	cie.insns = p;
	cie.end = end;
	return true;
}

// What the relocations of .eh_frame make of the field at `offset`: the
// run-time address the field points to (S + A), sorted by offset.
struct Reloc {
	uint64_t offset;
	uint64_t target;
};

// Every FDE of a loaded .eh_frame, with its run-time pc range, sorted.
// pc_begin comes from `relocs` where one covers the field, else from
// memory (an object RuntimeDyld has already relocated).
void index_fdes(const uint8_t *base, uint64_t size,
		const std::vector<Reloc> &relocs, std::vector<Fde> &out)
{
	const uint8_t *p = base, *end = base + size;
	while (end - p >= 8) {
		uint32_t len = rd32(p);
		if (len == 0)
			break; // terminator
		if (len == kLen64 || len > uint64_t(end - p - 4))
			break;
		const uint8_t *rec_end = p + 4 + len;
		uint32_t id = rd32(p + 4);
		if (id != 0) {
			const uint8_t *c = p + 4 - id;
			Cie cie;
			if (c >= base && c < p && parse_cie(c, cie) &&
			    cie.fde_enc != kPeOmit) {
				const uint8_t *q = p + 8;
				uint64_t pc, range;
				auto r = std::lower_bound(
					relocs.begin(), relocs.end(),
					uint64_t(q - base),
					[](const Reloc &x, uint64_t o) {
						return x.offset < o;
					});
				bool rel = r != relocs.end() &&
					   r->offset == uint64_t(q - base);
				if (read_ptr(q, rec_end, cie.fde_enc, true, pc) &&
				    read_ptr(q, rec_end, cie.fde_enc & 0x0f,
					     false, range))
					out.push_back({rel ? r->target : pc, range,
						       c, p});
			}
		}
		p = rec_end;
	}
	std::sort(out.begin(), out.end(),
		  [](const Fde &a, const Fde &b) { return a.pc < b.pc; });
}

void put32(std::vector<uint8_t> &b, uint32_t v)
{
	uint8_t t[4];
	std::memcpy(t, &v, 4);
	b.insert(b.end(), t, t + 4);
}

void put_leb(std::vector<uint8_t> &b, uint64_t v, bool sign)
{
	for (;;) {
		uint8_t byte = v & 0x7f;
		int64_t s = int64_t(v) >> 7;
		v = sign ? uint64_t(s) : v >> 7;
		bool done = sign ? ((s == 0 && !(byte & 0x40)) ||
				    (s == -1 && (byte & 0x40)))
				 : v == 0;
		if (!done)
			byte |= 0x80;
		b.push_back(byte);
		if (done)
			return;
	}
}

// Pads a record that started at `start` (its length field) with DW_CFA_nop
// to a multiple of 4 and fills in its length.
void close_record(std::vector<uint8_t> &b, size_t start)
{
	while ((b.size() - start) % 4)
		b.push_back(0); // DW_CFA_nop
	uint32_t len = uint32_t(b.size() - start - 4);
	std::memcpy(b.data() + start, &len, 4);
}

// The CIE "zR"/pcrel|sdata4 and the FDE for [pc, pc + size) that jitring
// takes (pc_begin 0: jitring writes it for perf's placement).
bool reencode(const Fde &f, uint64_t size, std::vector<uint8_t> &b)
{
	Cie cie;
	if (!parse_cie(f.cie, cie))
		return false;
	const uint8_t *fend = f.fde + 4 + rd32(f.fde);
	const uint8_t *q = f.fde + 8;
	uint64_t dummy;
	if (!read_ptr(q, fend, cie.fde_enc, false, dummy) ||
	    !read_ptr(q, fend, cie.fde_enc & 0x0f, false, dummy))
		return false;
	if (cie.has_z) {
		uint64_t n;
		if (!leb(q, fend, n, false) || n > uint64_t(fend - q))
			return false;
		q += n;
	}
	if (size > 0x7fffffffu)
		return false;

	b.clear();
	put32(b, 0);
	put32(b, 0); // CIE id
	b.push_back(cie.ra > 0xff ? 3 : 1);
	b.push_back('z');
	b.push_back('R');
	b.push_back(0);
	put_leb(b, cie.code_align, false);
	put_leb(b, cie.data_align, true);
	if (cie.ra > 0xff)
		put_leb(b, cie.ra, false);
	else
		b.push_back(uint8_t(cie.ra));
	put_leb(b, 1, false);
	b.push_back(0x1b); // pcrel | sdata4
	b.insert(b.end(), cie.insns, cie.end);
	close_record(b, 0);

	size_t fde = b.size();
	put32(b, 0);
	put32(b, uint32_t(fde + 4)); // back to the CIE
	put32(b, 0);                 // pc_begin: jitring's to fill
	put32(b, uint32_t(size));
	put_leb(b, 0, false); // no augmentation data
	b.insert(b.end(), q, fend);
	close_record(b, fde);
	return b.size() <= JITRING_EH_FRAME_MAX;
}

// The run-time address each relocation of an ELF object's .eh_frame puts
// in its field: the load address of the symbol's section, plus the
// symbol's offset in it, plus the addend.  Only pc_begin fields (and
// personality/LSDA pointers, which the re-encoder leaves out) are
// relocated.  Nothing for other formats: their .eh_frame is read as
// loaded.
void eh_frame_relocs(const object::ObjectFile &obj,
		     const RuntimeDyld::LoadedObjectInfo &info,
		     std::vector<Reloc> &out)
{
	if (!isa<object::ELFObjectFileBase>(&obj))
		return;
	for (const object::SectionRef &rs : obj.sections()) {
		Expected<object::section_iterator> target =
			rs.getRelocatedSection();
		if (!target) {
			consumeError(target.takeError());
			continue;
		}
		if (*target == obj.section_end())
			continue;
		Expected<StringRef> name = (*target)->getName();
		if (!name) {
			consumeError(name.takeError());
			continue;
		}
		if (*name != ".eh_frame")
			continue;
		for (const object::RelocationRef &rel : rs.relocations()) {
			object::symbol_iterator sym = rel.getSymbol();
			if (sym == obj.symbol_end())
				continue;
			Expected<object::section_iterator> sec =
				sym->getSection();
			Expected<uint64_t> addr = sym->getAddress();
			Expected<int64_t> addend =
				object::ELFRelocationRef(rel).getAddend();
			if (!sec || !addr || !addend) {
				if (!sec)
					consumeError(sec.takeError());
				if (!addr)
					consumeError(addr.takeError());
				if (!addend)
					consumeError(addend.takeError());
				continue;
			}
			if (*sec == obj.section_end())
				continue;
			uint64_t load = info.getSectionLoadAddress(**sec);
			if (!load)
				continue;
			out.push_back({rel.getOffset(),
				       load + *addr - (*sec)->getAddress() +
					       uint64_t(*addend)});
		}
	}
	std::sort(out.begin(), out.end(), [](const Reloc &a, const Reloc &b) {
		return a.offset < b.offset;
	});
}

class Listener final : public JITEventListener {
public:
	explicit Listener(struct jitring *jr) : jr_(jr) {}

	void notifyObjectLoaded(ObjectKey, const object::ObjectFile &obj,
				const RuntimeDyld::LoadedObjectInfo &info)
		override;
	void notifyFreeingObject(ObjectKey) override
	{
		// The code's addresses may be reused by a later object: its
		// CODE_LOADs come later in the file with new code_index
		// values, and perf maps them over the old ones from their
		// timestamps on.
		freed_.fetch_add(1, std::memory_order_relaxed);
	}

	struct jitring *writer() const { return jr_; }
	void stats(struct jitring_llvm_stats &st) const;

private:
	void write_one(StringRef name, uint64_t addr, uint64_t size,
		       uint64_t sec_index, uint64_t next,
		       const std::vector<Fde> &fdes, DWARFContext *dwarf);

	struct jitring *jr_;
	std::atomic<uint64_t> objects_{0}, functions_{0}, with_unwind_{0},
		with_lines_{0}, no_fde_{0}, refused_{0}, freed_{0},
		unwind_overlap_{0};
};

void Listener::write_one(StringRef name, uint64_t addr, uint64_t size,
			 uint64_t sec_index, uint64_t next,
			 const std::vector<Fde> &fdes, DWARFContext *dwarf)
{
	struct jitring_str part = {name.data(), name.size()};
	struct jitring_entry e = {};
	e.name_parts = &part;
	e.nr_name_parts = 1;
	e.code_addr = reinterpret_cast<const void *>(uintptr_t(addr));
	e.code_size = size;

	// Thread-local scratch: no allocation per function in steady state.
	thread_local std::vector<uint8_t> eh;
	thread_local std::vector<struct jitring_line> lines;
	auto it = std::lower_bound(
		fdes.begin(), fdes.end(), addr,
		[](const Fde &f, uint64_t a) { return f.pc < a; });
	bool unwind = false;
	if (it != fdes.end() && it->pc == addr &&
	    reencode(*it, std::min(it->range, size), eh)) {
		e.eh_frame = eh.data();
		e.eh_frame_size = uint32_t(eh.size());
		unwind = true;
	} else {
		no_fde_.fetch_add(1, std::memory_order_relaxed);
	}

	DILineInfoTable table;
	lines.clear();
	if (dwarf) {
		table = dwarf->getLineInfoForAddressRange(
			{addr, sec_index}, size,
			DILineInfoSpecifier(
				DILineInfoSpecifier::FileLineInfoKind::
					AbsoluteFilePath,
				DILineInfoSpecifier::FunctionNameKind::None));
		for (auto &row : table) {
			if (row.second.Line == 0)
				continue;
			if (lines.size() == JITRING_LINES_MAX)
				break;
			struct jitring_line l = {};
			l.addr = row.first;
			l.line = int32_t(row.second.Line);
			l.discrim = int32_t(row.second.Discriminator);
			l.file = row.second.FileName.c_str();
			lines.push_back(l);
		}
		e.lines = lines.data();
		e.nr_lines = uint32_t(lines.size());
	}

	int64_t r = jitring_write(jr_, &e);
	if (r == -EINVAL && e.eh_frame) {
		// An eh_frame jitring does not take (an instruction it
		// refuses): the function still gets its name.
		e.eh_frame = nullptr;
		e.eh_frame_size = 0;
		unwind = false;
		r = jitring_write(jr_, &e);
	}
	if (r < 0) {
		refused_.fetch_add(1, std::memory_order_relaxed);
		return;
	}
	functions_.fetch_add(1, std::memory_order_relaxed);
	if (unwind) {
		with_unwind_.fetch_add(1, std::memory_order_relaxed);
		// perf maps the unwinding data (eh_frame, 20-byte hdr) at
		// ALIGN_8(code end), mapped_size = ALIGN_16 of it.
		uint64_t end = ((addr + size + 7) & ~uint64_t(7)) +
			       ((e.eh_frame_size + 20 + 15) & ~uint64_t(15));
		if (next > addr && next < end)
			unwind_overlap_.fetch_add(1,
						  std::memory_order_relaxed);
	}
	if (e.nr_lines)
		with_lines_.fetch_add(1, std::memory_order_relaxed);
}

void Listener::notifyObjectLoaded(ObjectKey, const object::ObjectFile &obj,
				  const RuntimeDyld::LoadedObjectInfo &info)
{
	objects_.fetch_add(1, std::memory_order_relaxed);

	std::vector<Fde> fdes;
	std::vector<Reloc> relocs;
	bool has_lines = false;
	eh_frame_relocs(obj, info, relocs);
	for (const object::SectionRef &sec : obj.sections()) {
		Expected<StringRef> name = sec.getName();
		if (!name) {
			consumeError(name.takeError());
			continue;
		}
		if (*name == ".eh_frame") {
			uint64_t at = info.getSectionLoadAddress(sec);
			if (at && sec.getSize())
				index_fdes(reinterpret_cast<const uint8_t *>(
						   uintptr_t(at)),
					   sec.getSize(), relocs, fdes);
		} else if (*name == ".debug_line") {
			has_lines = true;
		}
	}

	// With a line table, the debug object (sections at their load
	// addresses) gives both the symbols' run-time addresses and lines.
	object::OwningBinary<object::ObjectFile> debug_obj;
	std::unique_ptr<DWARFContext> dwarf;
	const object::ObjectFile *syms = &obj;
	if (has_lines) {
		debug_obj = info.getObjectForDebug(obj);
		if (debug_obj.getBinary()) {
			syms = debug_obj.getBinary();
			dwarf = DWARFContext::create(*syms);
		}
	}

	// Functions in address order: each one's CODE_LOAD comes before
	// that of the function after it, so perf names every byte right
	// even where their mappings overlap (see layout.cpp).
	struct Func {
		StringRef name;
		uint64_t addr, size, sec;
	};
	std::vector<Func> funcs;
	for (const auto &p : object::computeSymbolSizes(*syms)) {
		const object::SymbolRef &sym = p.first;
		Expected<object::SymbolRef::Type> type = sym.getType();
		if (!type) {
			consumeError(type.takeError());
			continue;
		}
		if (*type != object::SymbolRef::ST_Function || !p.second)
			continue;
		Expected<StringRef> name = sym.getName();
		Expected<uint64_t> addr = sym.getAddress();
		Expected<object::section_iterator> sec = sym.getSection();
		if (!name || !addr || !sec || *sec == syms->section_end()) {
			if (!name)
				consumeError(name.takeError());
			if (!addr)
				consumeError(addr.takeError());
			if (!sec)
				consumeError(sec.takeError());
			continue;
		}
		uint64_t at = *addr;
		if (syms == &obj) {
			uint64_t load = info.getSectionLoadAddress(**sec);
			if (!load)
				continue; // not loaded
			at = at - (*sec)->getAddress() + load;
		}
		funcs.push_back({*name, at, p.second, (*sec)->getIndex()});
	}
	std::sort(funcs.begin(), funcs.end(),
		  [](const Func &a, const Func &b) { return a.addr < b.addr; });
	for (size_t i = 0; i < funcs.size(); i++)
		write_one(funcs[i].name, funcs[i].addr, funcs[i].size,
			  funcs[i].sec,
			  i + 1 < funcs.size() ? funcs[i + 1].addr : 0, fdes,
			  dwarf.get());
}

void Listener::stats(struct jitring_llvm_stats &st) const
{
	st.objects = objects_.load(std::memory_order_relaxed);
	st.functions = functions_.load(std::memory_order_relaxed);
	st.with_unwind = with_unwind_.load(std::memory_order_relaxed);
	st.with_lines = with_lines_.load(std::memory_order_relaxed);
	st.no_fde = no_fde_.load(std::memory_order_relaxed);
	st.refused = refused_.load(std::memory_order_relaxed);
	st.freed = freed_.load(std::memory_order_relaxed);
	st.unwind_overlap = unwind_overlap_.load(std::memory_order_relaxed);
}

Listener *from(LLVMJITEventListenerRef l)
{
	return static_cast<Listener *>(unwrap(l));
}

} // namespace

extern "C" {

JITRING_API int jitring_llvm_listener_open(const struct jitring_config *cfg,
					   LLVMJITEventListenerRef *out)
{
	if (!out)
		return -EINVAL;
	struct jitring *jr;
	int ret = jitring_open(cfg, &jr);
	if (ret < 0)
		return ret;
	Listener *l = new (std::nothrow) Listener(jr);
	if (!l) {
		jitring_close(jr);
		return -ENOMEM;
	}
	*out = wrap(static_cast<JITEventListener *>(l));
	return 0;
}

JITRING_API struct jitring *
jitring_llvm_listener_writer(LLVMJITEventListenerRef l)
{
	return l ? from(l)->writer() : nullptr;
}

JITRING_API int jitring_llvm_listener_stats(LLVMJITEventListenerRef l,
					    struct jitring_llvm_stats *st)
{
	if (!l || !st || st->struct_size < 8)
		return -EINVAL;
	struct jitring_llvm_stats full = {};
	from(l)->stats(full);
	uint32_t n = std::min<uint32_t>(st->struct_size, sizeof(full));
	std::memcpy(reinterpret_cast<char *>(st) + 8,
		    reinterpret_cast<char *>(&full) + 8, n - 8);
	return 0;
}

JITRING_API void jitring_llvm_listener_close(LLVMJITEventListenerRef l)
{
	if (!l)
		return;
	Listener *p = from(l);
	jitring_close(p->writer());
	delete p;
}

} // extern "C"
