/* version.c — library version string. */
#include "datagrid.h"

#define DG_STR2(x) #x
#define DG_STR(x) DG_STR2(x)

const char *dg_version(void)
{
	return "datagrid " DG_STR(DG_VERSION_MAJOR) "." DG_STR(DG_VERSION_MINOR) "."
	    DG_STR(DG_VERSION_PATCH);
}
