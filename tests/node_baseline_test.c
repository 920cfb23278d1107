/*
 * node_baseline_test.c — the "baseline" admin command (node/admin_baseline.c)
 * on two in-process nodes: show (auto), set with a refusal's reason, the
 * result's shape after a change.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "node/admin_baseline.h"
#include "node/datagrid.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

int dgt_admin_baseline_tests(void);

#define OK(x) assert_int_equal((x), DG_OK)

static dg_node *start(const char *seed)
{
	dg_node_config cfg;
	dg_node_config_init(&cfg);
	cfg.listen_url = "tcp://127.0.0.1:0";
	cfg.cluster_name = "node-baseline-test";
	cfg.seeds = &seed;
	cfg.nseeds = seed != NULL;
	cfg.failure_timeout_ms = 1000;
	cfg.heartbeat_ms = 100;
	cfg.join_timeout_ms = 5000;
	cfg.request_timeout_ms = 5000;
	/* a baseline with an offline address among two: refused under
	 * majority (fewer than a majority online), which transport_test's
	 * test_majority_baseline_refused covers */
	cfg.partition_policy = DG_PARTITION_POLICY_NONE;
	dg_node *n = NULL;
	OK(dg_node_start(&cfg, &n));
	return n;
}

static dg_err run(dg_node *n, const char *args_json, cJSON **result, char *why, size_t wl)
{
	cJSON *args = cJSON_Parse(args_json);
	assert_non_null(args);
	*result = cJSON_CreateObject();
	dg_err e = dgi_admin_cmd_baseline(n, args, *result, why, wl);
	cJSON_Delete(args);
	return e;
}

static void test_admin_baseline(void **state)
{
	(void)state;
	dg_node *a = start(NULL);
	dg_node *b = start(dg_node_address(a));
	int64_t va = 0, vb = -1;
	for (int i = 0; i < 500; i++) { /* both on the two-node topology */
		if (dg_node_topology(a, &va, NULL, 0) == 2 && dg_node_topology(b, &vb, NULL, 0) == 2 &&
		    va == vb)
			break;
		struct timespec ts = { 0, 10 * 1000000 };
		nanosleep(&ts, NULL);
	}
	assert_int_equal(va, vb);
	char why[256] = "";
	cJSON *r;
	OK(run(b, "{}", &r, why, sizeof(why)));
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(r, "auto")));
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(r, "baseline")), 0);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(r, "standby")), 0);
	cJSON_Delete(r);

	assert_int_equal(run(b, "{\"op\":\"set\",\"nodes\":[\"tcp://127.0.0.1:1\"]}", &r, why,
	    sizeof(why)), DG_ERR_INVAL);
	assert_non_null(strstr(why, "no online server"));
	cJSON_Delete(r);
	assert_int_equal(run(b, "{\"op\":\"set\"}", &r, why, sizeof(why)), DG_ERR_INVAL);
	assert_non_null(strstr(why, "nodes"));
	cJSON_Delete(r);
	assert_int_equal(run(b, "{\"op\":\"swap\",\"nodes\":[\"x\"]}", &r, why, sizeof(why)),
	    DG_ERR_INVAL);
	cJSON_Delete(r);

	char args[256];
	snprintf(args, sizeof(args), "{\"op\":\"set\",\"nodes\":[\"%s\",\"tcp://127.0.0.1:2\"]}",
	    dg_node_address(a));
	OK(run(b, args, &r, why, sizeof(why)));
	assert_false(cJSON_IsTrue(cJSON_GetObjectItem(r, "auto")));
	assert_true(cJSON_GetObjectItem(r, "topology_version")->valuedouble > (double)va);
	const cJSON *bl = cJSON_GetObjectItem(r, "baseline");
	assert_int_equal(cJSON_GetArraySize(bl), 2);
	int online = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, bl) {
		bool on = cJSON_IsTrue(cJSON_GetObjectItem(it, "online"));
		online += on;
		assert_int_equal(strlen(cJSON_GetObjectItem(it, "id")->valuestring), on ? 16 : 0);
	}
	assert_int_equal(online, 1);
	const cJSON *sb = cJSON_GetObjectItem(r, "standby");
	assert_int_equal(cJSON_GetArraySize(sb), 1);
	assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(sb, 0), "address")->valuestring,
	    dg_node_address(b));
	cJSON_Delete(r);

	snprintf(args, sizeof(args), "{\"op\":\"add\",\"nodes\":[\"%s\"]}", dg_node_address(b));
	OK(run(a, args, &r, why, sizeof(why)));
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(r, "baseline")), 3);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(r, "standby")), 0);
	cJSON_Delete(r);
	dg_node_stop(b);
	dg_node_stop(a);
}

int dgt_admin_baseline_tests(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_admin_baseline),
	};
	return cmocka_run_group_tests_name("admin_baseline", tests, NULL, NULL);
}
