/* SPDX-License-Identifier: Apache-2.0
 * te_handles.h -- the registry of live heap objects that a library hands
 * out as opaque pointers.
 * A pointer is registered when its object is created and removed when it
 * is destroyed, so a public call given a destroyed or foreign pointer
 * answers "invalid" instead of reading freed memory.  The code is
 * common/handles.c, compiled into libtecore (sequences) and libtegraph
 * (memory pools, callables, offload contexts) and libtecomm (communicators):
 * each library has a registry of its own, so
 * one library's object is never taken for another's. */
#ifndef TE_HANDLES_H
#define TE_HANDLES_H

/* add: 0, or -1 out of memory; del: 1 when p was live; live: 1 when p is
 * a registered object (only the pointer value is compared: a destroyed
 * object is never read). */
int te_handle_add(const void *p);
int te_handle_del(const void *p);
int te_handle_live(const void *p);
/* tecore_fini: frees the library's table (objects still live are the
 * program's); libtecore calls its own, libtegraph's fini hook its own. */
void te_handles_fini(void);

#endif
