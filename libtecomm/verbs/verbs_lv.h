/* SPDX-License-Identifier: Apache-2.0 */
/* verbs_lv.h -- the verbs level's state (verbs_comm.c, verbs_hier.c),
 * reached through c->lv[TC_LV_VERBS]: this rank's endpoint, the
 * service-engine jobs that drive its allreduces and their page-locked
 * staging; private to the level's files. */
#ifndef TC_VERBS_LV_H
#define TC_VERBS_LV_H

#include "level.h"
#include "verbs_priv.h"

struct tc_vjob;
struct tc_vhost;
struct tc_verbs_lv {
  struct tc_vb *vb;          /* the endpoint, or NULL (lv_why says why) */
  struct tc_vjob *jobs;      /* service-engine jobs, one per shape */
  struct tc_vhost *hosts;    /* page-locked staging, newest first */
};
#define VL(c) ((struct tc_verbs_lv *)(c)->lv[TC_LV_VERBS])

#endif
