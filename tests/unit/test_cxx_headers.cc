// SPDX-License-Identifier: MIT
// Compile test: the public headers are valid C++ and usable from it.
#include <jitring.h>
#include <jitring/jitdump.h>

int main()
{
	struct jitring_config cfg;
	jitring_config_init(&cfg);
	static_assert(sizeof(struct jitdump_code_load) == 56, "layout");
	return cfg.struct_size == sizeof(cfg) ? 0 : 1;
}
