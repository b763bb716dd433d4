/* placeholder */
#include "check_graph_common.h"
static Suite *make_suite(void) { return suite_create("x"); }
TE_TEST_MAIN(make_suite, TE_TEST_DEVICE)
