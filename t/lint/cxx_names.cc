// SPDX-License-Identifier: Apache-2.0
// cxx_names.cc -- compiled (never run) by t/lint/header-cxx.sh: a C++ caller
// names every public struct of libte without the `struct` keyword, which
// it cannot when a function of the same name is declared (the function
// hides the type).  Each struct that once shared its name with a function
// appears here next to the function that fills it now.
#include <te/core.h>
#include <te/graph.h>
#include <te/offload.h>
#include <te/comm.h>

int te_cxx_names(tecore_seq_t *seq, tegraph_offload_t *off) {
  tecore_device_props props;
  tecore_tunable_info info;
  const tecore_kernel_def *def = nullptr;
  tecore_seq_saved saved[4];
  tecore_svc_stats svc;
  tegraph_offload_stats ost;
  size_t n = 0;
  int bad = 0;
  bad |= tecore_device_get_props(0, &props) != TECORE_SUCCESS;
  bad |= tecore_tunable_get_info(0, &info) != TECORE_SUCCESS;
  bad |= tecore_kernel_get_def(0, &def) != TECORE_SUCCESS;
  bad |= tecore_seq_get_saved(seq, saved, 4, &n) != TECORE_SUCCESS;
  bad |= tecore_svc_get_stats(&svc) != TECORE_SUCCESS;
  bad |= tegraph_offload_get_stats(off, &ost) != TEGRAPH_SUCCESS;
  return bad;
}
