/* SPDX-License-Identifier: Apache-2.0 */
/* vdev_fork.c -- fork safety for the vdev backend.  A forked child has
 * only the forking thread: the stream workers of its parent are gone.  So
 * that a child (a Check test, a rank started with fork) can use the device
 * on its own, every vdev lock is taken across fork, and the child forgets
 * the parent's streams and captures (see vdev.h). */
#include "vdev/vdev.h"

atomic_int te_vdev_fork_gen;

/* Outermost lock first, as vdev.h orders them. */
static void fork_prepare(void) {
  te_vdev_capture_fork(VDEV_FORK_PREPARE);
  te_vdev_ctx_fork(VDEV_FORK_PREPARE);
  pthread_mutex_lock(&te_vdev_vmm_lock);
  te_vdev_registry_fork(VDEV_FORK_PREPARE);
  te_vdev_mem_fork(VDEV_FORK_PREPARE);
}

static void fork_after(enum vdev_fork_phase phase) {
  if (phase == VDEV_FORK_CHILD) atomic_fetch_add(&te_vdev_fork_gen, 1);
  te_vdev_mem_fork(phase);
  te_vdev_registry_fork(phase);
  pthread_mutex_unlock(&te_vdev_vmm_lock);
  te_vdev_ctx_fork(phase);
  te_vdev_capture_fork(phase);
}

static void fork_parent(void) { fork_after(VDEV_FORK_PARENT); }
static void fork_child(void) { fork_after(VDEV_FORK_CHILD); }

/* Called once, from the backend's initialization. */
void te_vdev_fork_register(void) {
  if (pthread_atfork(fork_prepare, fork_parent, fork_child) != 0)
    TE_WARN(TECORE_SUBSYS_INIT, "vdev: pthread_atfork failed; forked children must not use vdev");
}
