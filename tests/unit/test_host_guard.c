/* The DNS-rebinding guard of a loopback listener (agent/host_guard.h): which
 * Host headers it answers, and how allowed_hosts is read, against a table
 * written out by hand. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "agent/host_guard.h"

typedef struct host_case {
  const char *host; /* the Host header; NULL: none */
  int allowed;
} host_case;

static void check_all(const host_guard *g, const host_case *cases, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++)
    cr_expect_eq(host_guard_allows(g, cases[i].host), cases[i].allowed, "%s: Host '%s': %s", what,
                 cases[i].host ? cases[i].host : "(none)",
                 cases[i].allowed ? "refused, should be answered" : "answered, should be refused");
}

Test(host_guard, names_only_this_machine_by_default) {
  host_guard g = {0};
  static const host_case cases[] = {
      {NULL, 1},
      {"", 1},
      {"127.0.0.1", 1},
      {"127.0.0.1:9477", 1},
      {"10.1.2.3:80", 1}, /* any IP literal: a page of that origin is not the attacker's */
      {"[::1]:9477", 1},
      {"[::1]", 1},
      {"::1", 1}, /* without brackets, as some clients write it */
      {"localhost", 1},
      {"localhost:9477", 1},
      {"LOCALHOST.:9477", 1},
      {"ui.localhost:9477", 1}, /* RFC 6761: browsers resolve *.localhost to loopback */
      {"gpu-node", 1},          /* one label: no public DNS name */
      {"t", 1},
      {"attacker.example", 0},
      {"attacker.example:9477", 0},
      {"attacker.example.:9477", 0},
      {"localhost.attacker.example", 0},
      {"127.0.0.1.attacker.example", 0},
      {"evillocalhost:9477", 1}, /* one label */
      {"evil-localhost.com", 0},
      {"[::1", 0},
      {"[::1]x", 0},
      {"[not-v6]:80", 0},
      {"localhost:http", 0}, /* a port is digits */
      {"a:b:c", 0},
  };
  check_all(&g, cases, sizeof cases / sizeof *cases, "defaults");
}

Test(host_guard, allowed_hosts_adds_names_and_domains) {
  host_guard g;
  char err[512];
  cr_assert_eq(host_guard_parse("gpu1.Example.com;.cluster.local", &g, err, sizeof err), 0, "%s",
               err);
  cr_assert_eq(g.n, 2);
  cr_assert_str_eq(g.names[0], "gpu1.example.com");
  static const host_case cases[] = {
      {"gpu1.example.com", 1}, {"GPU1.EXAMPLE.COM:9477", 1}, {"gpu1.example.com.", 1},
      {"gpu2.example.com", 0}, {"example.com", 0},           {"agent.ns.svc.cluster.local:9477", 1},
      {"cluster.local", 0}, /* ".cluster.local" is the names under it */
      {"xcluster.local", 0},   {"attacker.example", 0},      {"localhost", 1},
  };
  check_all(&g, cases, sizeof cases / sizeof *cases, "allowed_hosts");
  host_guard_add(&g, "node7.example.org");
  cr_expect(host_guard_allows(&g, "node7.example.org:9477"));
  host_guard_add(&g, "not a name"); /* silently not added */
  cr_expect_eq(g.n, 3);
}

/* A full allowed_hosts leaves room for the machine's two names, which a
 * loopback listener always answers (docs/security.md). */
Test(host_guard, the_machines_names_fit_beside_a_full_list) {
  char list[HOST_GUARD_MAX_NAMES * 8 + 8] = "";
  for (int i = 0; i < HOST_GUARD_MAX_NAMES; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%sh%d.x", i ? ";" : "", i);
  host_guard g;
  char err[512];
  cr_assert_eq(host_guard_parse(list, &g, err, sizeof err), 0, "%s", err);
  cr_assert_eq(g.n, HOST_GUARD_MAX_NAMES);
  host_guard_add(&g, "node7.example.org");
  host_guard_add(&g, "node7.cluster.internal");
  cr_expect(host_guard_allows(&g, "node7.example.org:9477"), "the hostname setting refused");
  cr_expect(host_guard_allows(&g, "node7.cluster.internal"), "the system's name refused");
  cr_expect(host_guard_allows(&g, "h15.x"), "the list's last name refused");
  host_guard_add(&g, "third.example"); /* no room: silently not added */
  cr_expect_not(host_guard_allows(&g, "third.example"));
}

Test(host_guard, star_answers_any_host) {
  host_guard g;
  char err[256];
  cr_assert_eq(host_guard_parse("*", &g, err, sizeof err), 0);
  cr_expect(g.any);
  cr_expect(host_guard_allows(&g, "attacker.example:9477"));
  cr_expect(host_guard_allows(&g, "a:b:c"));
}

Test(host_guard, a_bad_list_is_refused_and_changes_nothing) {
  static const char *const bad[] = {"",          ";",         "a;;b", "a;",
                                    "bad name",  "a..b",      ".a.",  "-a.b_c",
                                    "*.example", "host:9477", "a,b",  "é.example"};
  host_guard g;
  char err[512];
  cr_assert_eq(host_guard_parse("kept.example", &g, err, sizeof err), 0);
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    err[0] = '\0';
    cr_expect_eq(host_guard_parse(bad[i], &g, err, sizeof err), -1, "'%s' taken", bad[i]);
    cr_expect(strstr(err, "allowed_hosts"), "'%s': %s", bad[i], err);
    cr_expect_eq(g.n, 1, "'%s' changed the guard", bad[i]);
    cr_expect_str_eq(g.names[0], "kept.example");
  }
  char many[HOST_GUARD_MAX_NAMES * 8 + 8] = "";
  for (int i = 0; i <= HOST_GUARD_MAX_NAMES; i++)
    snprintf(many + strlen(many), sizeof many - strlen(many), "%sh%d.x", i ? ";" : "", i);
  cr_expect_eq(host_guard_parse(many, &g, err, sizeof err), -1);
  cr_expect(strstr(err, "more than"), "%s", err);
  char longest[HOST_GUARD_NAME_MAX + 2];
  memset(longest, 'a', sizeof longest - 1);
  longest[sizeof longest - 1] = '\0';
  cr_expect_eq(host_guard_parse(longest, &g, err, sizeof err), -1, "a 255-character name taken");
}
