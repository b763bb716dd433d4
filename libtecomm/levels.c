/* SPDX-License-Identifier: Apache-2.0 */
/* levels.c -- the table of levels (level.h) and the walks over it that
 * init, destroy, a collective's health check, abort, status, selection
 * and describe make.  The table's order is the fallback chain's, best
 * first; a level opens after the ones above it, so it may read what they
 * decided (the verbs level, the last resort, opens only when none of the
 * others gave the communicator a place). */
#include "level.h"

#define TC_LV_ROW_(id, name, places) [TC_LV_##id] = &tc_level_##name,
const struct tc_level *const tc_levels[TC_LV_COUNT] = {TC_LEVELS(TC_LV_ROW_)};

/* tc_algo_at_t's values are the rows' indices (base/level_list.h). */
const struct tc_level *tc_level_at(tc_algo_at_t at) {
  return (int)at >= 0 && (int)at < TC_LV_COUNT ? tc_levels[at] : NULL;
}

void tc_levels_caps(struct tecomm_comm *c, struct tc_caps *k) {
  for (int i = 0; i < TC_LV_COUNT; i++)
    if (tc_levels[i]->caps) tc_levels[i]->caps(c, k);
}

tecomm_result_t tc_levels_open(struct tecomm_comm *c, const struct tc_caps *all,
                               tecore_stream_t st) {
  for (int i = 0; i < TC_LV_COUNT; i++) {
    const struct tc_level *l = tc_levels[i];
    if (l->last_resort && c->level != TC_LEVEL_NONE) continue;
    TC_CHECK(l->open(c, all, st));
  }
  return TECOMM_SUCCESS;
}

/* Each level's close is timed at TE_DEBUG=INFO: a slow teardown (a
 * backend's own, such as NCCL's) names itself. */
void tc_levels_close(struct tecomm_comm *c) {
  for (int i = TC_LV_COUNT - 1; i >= 0; i--) {
    int64_t t0 = tc_now_ms();
    tc_levels[i]->close(c);
    int64_t ms = tc_now_ms() - t0;
    if (ms > 0) TC_INFO("tecomm_comm_destroy: level %s closed in %lld ms", tc_levels[i]->name,
                        (long long)ms);
  }
}

tecomm_result_t tc_levels_health(struct tecomm_comm *c, const char *fn, int check_device) {
  for (int i = 0; i < TC_LV_COUNT; i++)
    if (tc_levels[i]->health) TC_CHECK(tc_levels[i]->health(c, fn, check_device));
  return TECOMM_SUCCESS;
}

void tc_levels_abort(struct tecomm_comm *c) {
  for (int i = 0; i < TC_LV_COUNT; i++)
    if (tc_levels[i]->abort) tc_levels[i]->abort(c);
}

int tc_levels_failed_peer(struct tecomm_comm *c) {
  for (int i = 0; i < TC_LV_COUNT; i++) {
    int p = tc_levels[i]->failed_peer ? tc_levels[i]->failed_peer(c) : -1;
    if (p >= 0) return p;
  }
  return -1;
}

void tc_levels_describe(struct tecomm_comm *c, struct tc_text *t) {
  for (int i = 0; i < TC_LV_COUNT; i++) tc_levels[i]->describe(c, t);
}
