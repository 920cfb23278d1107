/*
 * datagrid.h — the public header of datagrid, the distributed in-memory
 * data grid.  Include this one header; link libdatagrid (pkg-config
 * datagrid, or find_package(datagrid) and datagrid::datagrid in CMake).
 *
 * Today it exposes the binary codec (marshal/marshal.h): registered type
 * descriptors, writers, readers and binary objects.  The embedded node API
 * (nodes, caches, transactions) joins it here as those modules land.
 */
#ifndef DATAGRID_H
#define DATAGRID_H

#include "marshal/marshal.h"

#define DG_VERSION_MAJOR 0
#define DG_VERSION_MINOR 1
#define DG_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif

/* "datagrid 0.1.0". Static string. Thread-safe. */
DG_API const char *dg_version(void);

#ifdef __cplusplus
}
#endif
#endif /* DATAGRID_H */
