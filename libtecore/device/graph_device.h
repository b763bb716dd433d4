/* graph_device.h -- SPDX-License-Identifier: Apache-2.0
 * Private to libtecore: the records of executables launched from the
 * device (graph_device.c says how). */
#ifndef TECORE_GRAPH_DEVICE_H
#define TECORE_GRAPH_DEVICE_H

#include "device_ops.h"

/* Before instantiating graph with flags: TECORE_ERR_INVALID naming fn when
 * flags ask for a device launch that graph's nodes (or the other flags)
 * do not allow; TECORE_SUCCESS without the flag. */
tecore_result_t te_graph_device_check(const struct te_device_ops *o, tecore_graph_t graph,
                                      unsigned flags, const char *fn);
/* After such an instantiation: the backend's launcher and exec's record. */
tecore_result_t te_graph_device_add(const struct te_device_ops *o, tecore_graph_exec_t exec,
                                    const char *fn);
/* After exec is destroyed: its record and launcher go (nothing when it
 * has none). */
void te_graph_device_forget(const struct te_device_ops *o, tecore_graph_exec_t exec);
/* Was exec instantiated for launch from the device? */
int te_graph_device_has(tecore_graph_exec_t exec);
/* After exec's nodes changed: the next device launch uploads it first. */
void te_graph_device_dirty(tecore_graph_exec_t exec);
/* A graph chain takes exec (delta +1) or lets it go (-1): TECORE_ERR_INVALID
 * naming fn when exec has no record (not instantiated for device launch). */
tecore_result_t te_graph_device_chain(tecore_graph_exec_t exec, int delta, const char *fn);
/* How many chains hold exec (0 without a record). */
int te_graph_device_chained(tecore_graph_exec_t exec);
/* Whether exec changed since its last upload; the mark is cleared (the
 * caller uploads it). */
int te_graph_device_take_dirty(tecore_graph_exec_t exec);
/* tecore_graph_launch_device's work once exec is not NULL. */
tecore_result_t te_graph_device_launch(const struct te_device_ops *o, tecore_graph_exec_t exec,
                                       tecore_stream_t stream);
/* tecore_fini: every record goes (no call reaches the backend). */
void te_graph_device_fini(void);

#endif
