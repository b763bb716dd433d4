/* SPDX-License-Identifier: Apache-2.0
 * info.h -- te-info's parts: the prose for people (te-info.c) and the
 * document for scripts (info_doc.c: --json, --csv). */
#ifndef TE_TOOLS_INFO_H
#define TE_TOOLS_INFO_H

struct te_out;

/* "allowed where the device has it", or "disabled by VAR=0" */
const char *te_info_multicast(void);
/* The document: build, backends, devices, peers, libraries, tunables
 * (tunables_only: the tunables alone, as -e asks).  0, or 1 when no
 * backend works or a part could not be read. */
int te_info_doc(struct te_out *o, int tunables_only);

#endif
