/* A plugin whose constructor opens the clock, as a C++ `static int g = perfclock_init();` does:
 * the constructor runs inside dlopen(), with the dynamic loader's lock held. */
#include "perfclock.h"

int plugin_init_result = 1;

__attribute__((constructor)) static void plugin_constructor(void)
{
	plugin_init_result = perfclock_init();
}
