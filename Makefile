# gridha: PGXS build. `make installcheck` checks an installed server (the
# pg_regress tests, the isolation specs and the pgTAP files), `make test`
# runs every suite on a throwaway cluster, `make bench` the benchmarks (both
# install what they need first); `make dist` makes the PGXN bundle.

EXTENSION = gridha
MODULE_big = gridha
# Core: claims, hand-out, reports
OBJS = src/gridha.o src/settings.o src/generation.o src/spi_util.o src/tables.o src/rows.o src/instances.o src/counts.o src/claims.o src/queue.o src/status.o
# HTTP submission to a ledger (libcurl), shared with client/gridha-client
OBJS += src/dlt_http.o src/dlt_url.o src/dlt_json.o
# Background-worker instances
OBJS += src/slots.o src/worker.o src/submit.o src/monitor.o src/step.o src/limit.o src/targets.o
# Section 7: leader lease, ID windows, rate limits
OBJS += src/leader.o src/leader12.o src/idseq.o src/ratelimit.o src/totals.o src/lockcheck.o
OBJS += src/sql12.o src/claims12.o src/instances12.o src/bands.o src/attached.o src/path.o
# The version is gridha.control's, the scripts are whatever sql/ holds.
EXTVERSION = $(shell sed -n "s/^default_version *= *'\([^']*\)'.*/\1/p" gridha.control)
# PGXN's version is semantic (X.Y.Z): 1.1 -> 1.1.0
DISTVERSION = $(shell echo '$(EXTVERSION)' | awk -F. '{ printf "%s.%s.%s", $$1, ($$2 == "" ? 0 : $$2), ($$3 == "" ? 0 : $$3) }')
DATA = $(sort $(wildcard sql/gridha--*.sql))
DOCS = README.md

# The pg_regress tests: inputs in test/sql, outputs in expected/ (sql/ holds
# only the install scripts). pg_regress reads INPUTDIR/sql and, before 16
# (no --expecteddir), INPUTDIR/expected: test/expected is a symlink to
# ../expected for 15; 16 and later are pointed at expected/ itself (below,
# after PGXS), so they need no symlink. docs/testing.md says why.
REGRESS = api claims lifecycle errors coordination plans counts invariants writer
REGRESS_OPTS = --inputdir=test --load-extension=gridha

# `make installcheck` runs, against the server PGHOST/PGPORT/PGUSER name
# (gridha installed, and for the specs and pgTAP files preloaded:
# shared_preload_libraries = 'gridha'), the pg_regress tests above, every
# isolation spec in test/isolation/specs (PGXS's ISOLATION, as contrib does)
# and every pgTAP file in test/pgtap (pg_prove, in a database of its own;
# needs pgTAP and pg_prove). Empty any of the three on the command line to
# leave it out (make installcheck ISOLATION= PGTAP_TESTS=).
ISOLATION = $(basename $(notdir $(wildcard test/isolation/specs/*.spec)))
# Specs that need the test build's hooks (GRIDHA_TEST_HOOKS=1): a release
# build's installcheck leaves them out.
HOOK_SPECS = liveness-bind-probe liveness-bind-cancel
ifneq ($(GRIDHA_TEST_HOOKS),1)
ISOLATION := $(filter-out $(HOOK_SPECS),$(ISOLATION))
endif
ISOLATION_OPTS = --inputdir=test/isolation --load-extension=gridha
# The tests on PostgreSQL's TAP framework (PostgreSQL::Test::Cluster): each
# test/t/*.pl starts clusters of its own from the installed programs.
# `make prove_installcheck` runs them (and `make installcheck` last), as any
# user but root: initdb refuses root, so a root build leaves them out, and
# test/run.sh runs them as the postgres user. PROVE_TESTS='test/t/021_x.pl
# ...' runs only those; PG_TEST_PERL (below) names the framework.
TAP_TESTS = 1
PROVE_TESTS = $(sort $(wildcard test/t/*.pl))
GRIDHA_UID := $(shell id -u)
ifeq ($(GRIDHA_UID),0)
TAP_TESTS =
endif
PGTAP_TESTS = $(sort $(wildcard test/pgtap/*.sql))
PGTAP_DB = contrib_regression_pgtap

PG_CONFIG ?= $(shell test -x /usr/lib/postgresql/15/bin/pg_config && echo /usr/lib/postgresql/15/bin/pg_config || echo pg_config)
PG_CPPFLAGS = -Isrc
# The test build (make test builds with GRIDHA_TEST_HOOKS=1): hooks that let
# isolation specs hold a step at a chosen point (src/instances.c); a release
# build has none of them.
ifeq ($(GRIDHA_TEST_HOOKS),1)
PG_CPPFLAGS += -DGRIDHA_TEST_HOOKS
endif
# The lock-order checker (src/lockcheck.c): every row lock a call takes on
# gridha's tables is checked against docs/concurrency.md's order, and a
# call that breaks it fails at once. make test builds with it.
ifeq ($(GRIDHA_LOCK_CHECK),1)
PG_CPPFLAGS += -DGRIDHA_LOCK_CHECK
endif
PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers -Wno-sign-compare
SHLIB_LINK =
SHLIB_LINK += -lcurl
EXTRA_CLEAN += client/gridha-client client/test_dlt_http test/unit/test_limit .pg_build gridha-*.zip

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# PostgreSQL 16 and later: the expected outputs where they are
ifeq ($(shell test '$(MAJORVERSION)' -ge 16 2>/dev/null && echo y),y)
# (pg_regress reads EXPECTEDDIR/expected/NAME.out, and falls back to
# INPUTDIR/expected when that is missing: the top directory, not expected/)
REGRESS_OPTS += --expecteddir=.
else
# Before 16 pg_regress reads test/expected, the symlink. An unpacker that
# does not restore symlinks (pgxnclient's, Python's zipfile) leaves a file
# that holds the link's target: installcheck makes it the link again.
installcheck: test-expected-link
endif

# PostgreSQL's TAP framework for prove_installcheck: PG_TEST_PERL, the
# directory holding PostgreSQL/Test/Cluster.pm and Utils.pm (a source
# tree's src/test/perl). By default PGXS's own (an installation configured
# with --enable-tap-tests; Debian's postgresql-client-NN puts it there), else
# the newest Debian package's (/usr/lib/postgresql/NN/lib/pgxs/src/test/perl:
# the framework drives this installation's programs through PATH, as
# test/run.sh does). An installation configured without --enable-tap-tests
# has PGXS's prove_installcheck say "TAP tests not enabled" and no PROVE:
# then the recipe below, the same one with prove from PATH.
ifndef PG_TEST_PERL
PG_TEST_PERL := $(patsubst %/PostgreSQL/Test/Cluster.pm,%,$(firstword \
	$(abspath $(wildcard $(top_srcdir)/src/test/perl/PostgreSQL/Test/Cluster.pm)) \
	$(shell ls -d /usr/lib/postgresql/*/lib/pgxs/src/test/perl/PostgreSQL/Test/Cluster.pm 2>/dev/null | sort -V -r)))
endif
PG_PROVE_FLAGS = -I $(PG_TEST_PERL) -I $(srcdir)
ifeq ($(strip $(PROVE)),)
PROVE = prove
endif
ifneq ($(enable_tap_tests),yes)
define prove_installcheck
echo "# +++ tap install-check (PG_TEST_PERL=$(PG_TEST_PERL)) +++" && \
rm -rf '$(CURDIR)/tmp_check' && $(MKDIR_P) '$(CURDIR)/tmp_check' && \
cd $(srcdir) && \
   PATH="$(bindir):$(CURDIR):$$PATH" PGPORT='6$(DEF_PGPORT)' \
   TESTDIR='$(CURDIR)' TESTDATADIR='$(CURDIR)/tmp_check' TESTLOGDIR='$(CURDIR)/tmp_check/log' \
   PG_REGRESS='$(top_builddir)/src/test/regress/pg_regress' \
   $(PROVE) $(PG_PROVE_FLAGS) $(PROVE_FLAGS) $(if $(PROVE_TESTS),$(PROVE_TESTS),t/*.pl)
endef
endif

# Before any TAP test: not root (initdb refuses it) and a framework found.
.PHONY: tap-framework-check
tap-framework-check:
	@if [ '$(GRIDHA_UID)' = 0 ]; then \
		echo "prove_installcheck: initdb refuses root: run it as another user" \
			"(runuser -u postgres -- make prove_installcheck ...), or make test" >&2; exit 1; fi
	@if [ ! -f '$(PG_TEST_PERL)/PostgreSQL/Test/Cluster.pm' ]; then \
		echo "prove_installcheck: no PostgreSQL/Test/Cluster.pm in PG_TEST_PERL ('$(PG_TEST_PERL)'):" \
			"install postgresql-client-15 (Debian), or name a PostgreSQL source tree's" \
			"src/test/perl: make prove_installcheck PG_TEST_PERL=DIR (make installcheck TAP_TESTS=" \
			"leaves the TAP tests out)" >&2; exit 1; fi
ifdef TAP_TESTS
installcheck: tap-framework-check
endif

.PHONY: test-expected-link
test-expected-link:
	@[ -L test/expected ] || { rm -f test/expected && ln -s ../expected test/expected; }

# PGXS knows no header dependencies: any header change rebuilds every object
# (after the include, so that PGXS's "all" stays the default goal)
$(OBJS): $(wildcard src/*.h)

# What is compiled against one PostgreSQL does not load into another: when
# PG_CONFIG names another installation or version than the last build did
# (.pg_build keeps it), everything is rebuilt.
PG_BUILD := $(PG_CONFIG) $(VERSION) hooks=$(GRIDHA_TEST_HOOKS) lockcheck=$(GRIDHA_LOCK_CHECK)
ifneq ($(PG_BUILD),$(shell cat .pg_build 2>/dev/null))
$(shell echo '$(PG_BUILD)' >.pg_build)
endif
$(OBJS) $(OBJS:.o=.bc) client/gridha-client client/test_dlt_http test/unit/test_limit: .pg_build

# The reference external client and the unit test of src/dlt_http.c: plain
# programs on libpq and libcurl, built with the extension. src/dlt_json.c
# reads status bodies with PostgreSQL's JSON parser, so they are built as
# PostgreSQL frontend programs (-DFRONTEND, server headers, libpgcommon and
# libpgport).
CLIENT_CFLAGS = -std=c99 -D_POSIX_C_SOURCE=200809L -g -O2 -Wall -Wextra -Werror \
	-Wmissing-prototypes -Wdeclaration-after-statement -Isrc \
	-I$(shell $(PG_CONFIG) --includedir) \
	-DFRONTEND -I$(shell $(PG_CONFIG) --includedir-server)
# (Debian installs them in pkglibdir, a PostgreSQL built from source in libdir)
CLIENT_PGLIBDIR = $(dir $(firstword $(wildcard \
	$(shell $(PG_CONFIG) --pkglibdir)/libpgcommon.a \
	$(shell $(PG_CONFIG) --libdir)/libpgcommon.a)))
CLIENT_PGLIBS = $(CLIENT_PGLIBDIR)libpgcommon.a $(CLIENT_PGLIBDIR)libpgport.a
CLIENT_LIBS = $(CLIENT_PGLIBS) -L$(shell $(PG_CONFIG) --libdir) -lpq -lcurl
CLIENT_SRCS = src/dlt_http.c src/dlt_url.c src/dlt_json.c src/dlt_http.h src/dlt_url.h src/dlt_json.h src/compat.h

all: client/gridha-client client/test_dlt_http

client/gridha-client: client/gridha-client.c $(CLIENT_SRCS)
	$(CC) $(CLIENT_CFLAGS) -o $@ client/gridha-client.c src/dlt_http.c src/dlt_url.c src/dlt_json.c $(CLIENT_LIBS)

client/test_dlt_http: client/test_dlt_http.c $(CLIENT_SRCS)
	$(CC) $(CLIENT_CFLAGS) -o $@ client/test_dlt_http.c src/dlt_http.c src/dlt_url.c src/dlt_json.c \
		$(CLIENT_PGLIBS) -lcurl

# The unit test of src/limit.c's core (a fake clock, no server, no network):
# a frontend program too, built and run by test/suites/11_limit_unit.sh
# (not by `all`: a tree copied without test/ still builds; not before
# test/run.sh, which installs a fresh machine's compiler and headers first)
test/unit/test_limit: test/unit/test_limit.c src/limit.c src/limit.h $(CLIENT_SRCS)
	$(CC) $(CLIENT_CFLAGS) -o $@ test/unit/test_limit.c src/limit.c src/dlt_http.c src/dlt_url.c src/dlt_json.c \
		$(CLIENT_PGLIBS) -lcurl -lm

.PHONY: test bench demo ha fuzz soak installcheck-pgtap dist meta expected-totals

# The pgTAP files, each file's assertions counted by pg_prove: a
# prerequisite of installcheck, so they run before PGXS's recipe (pg_regress,
# then the specs); `make -k installcheck` runs those even when one fails.
ifneq ($(strip $(PGTAP_TESTS)),)
installcheck: installcheck-pgtap
endif
installcheck-pgtap:
	@echo "+++ pgTAP install-check (pg_prove) +++"
	$(bindir)/psql -X -q -v ON_ERROR_STOP=1 -d postgres \
		-c 'SET client_min_messages = warning' \
		-c 'DROP DATABASE IF EXISTS $(PGTAP_DB)' -c 'CREATE DATABASE $(PGTAP_DB)'
	$(bindir)/psql -X -q -v ON_ERROR_STOP=1 -d $(PGTAP_DB) \
		-c 'CREATE EXTENSION pgtap' -c 'CREATE EXTENSION gridha'
	pg_prove -d $(PGTAP_DB) $(PGTAP_TESTS)
	$(bindir)/psql -X -q -d postgres -c 'DROP DATABASE IF EXISTS $(PGTAP_DB)'

test:
	bash test/run.sh

.PHONY: prove_installcheck
prove_installcheck: tap-framework-check
	$(prove_installcheck)

# After a full `make test` on each major: write what each part ran into
# test/expected_totals (the lead's step when merged work adds tests).
expected-totals:
	bash test/run.sh --update-totals

# The PGXN bundle: gridha-<version>.zip of the committed tree (git
# archive: what is not committed is not in it; <version> is DISTVERSION),
# with a META.json whose version must be gridha.control's (test/pgxn_meta.py
# checks it against the PGXN Meta Spec first; `make meta` rewrites it).
dist:
	@git diff --quiet HEAD -- || echo "warning: uncommitted changes are not in the bundle" >&2
	python3 test/pgxn_meta.py --control gridha.control META.json
	git archive --format zip --prefix=gridha-$(DISTVERSION)/ -o gridha-$(DISTVERSION).zip HEAD
	@echo "gridha-$(DISTVERSION).zip"

# META.json's version fields from gridha.control (after a new release's
# default_version): then commit it.
meta:
	python3 test/pgxn_meta.py --sync --control gridha.control META.json

bench:
	bash test/bench/run.sh
	bash test/bench/idseq.sh
	bash test/bench/instructions.sh
	bash test/bench/ordered.sh
	bash test/bench/latency.sh
	bash test/bench/scale.sh
	bash test/bench/retention.sh
	bash test/bench/metrics.sh
	bash test/bench/settle.sh
	bash test/bench/citus.sh

# A minute of gridha at work: three workers, a test ledger, a takeover.
demo:
	bash demo/run.sh

# The fault-injection harness, long version: HA_DURATION seconds of random
# faults after one round of every kind (make ha HA_DURATION=1800). The
# database is one server unless told: HA_TOPOLOGY=replica (a primary and a
# hot standby; HA_REPLICA=sync or async; failover and switchover faults):
# test/t/050_ha.pl or 051_failover.pl, run longer; or HA_DB=patroni (two
# nodes under Patroni with etcd). test/ha/run.sh lists the rest (HA_SEED,
# HA_KINDS, HA_FAILOVER_LAG, HA_KEEP, ...).
HA_DURATION ?= 300
HA_TOPOLOGY ?= single
HA_REPLICA ?= sync
HA_DB ?=
ha:
	bash test/run.sh --setup-only
	HA_DURATION=$(HA_DURATION) HA_TOPOLOGY=$(HA_TOPOLOGY) HA_REPLICA=$(HA_REPLICA) \
		HA_DB=$(HA_DB) bash test/ha/run.sh

# The fuzzer, long version: FUZZ_SECONDS of generated hostile calls to every
# SQL function from several sessions while two workers and the reference
# client serve the same database (make fuzz FUZZ_SECONDS=3600; make test
# runs 120 s of it); FUZZ_SEED=N repeats the statements of a run; FUZZ_KEEP=1
# keeps the scripts, logs and a dump, FUZZ_AUDIT=1 records every change of
# instances and claims (test/t/060_fuzz.pl, test/fuzz).
FUZZ_SECONDS ?= 300
FUZZ_SEED ?=
fuzz:
	GRIDHA_ONLY=060_fuzz FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_SEED=$(FUZZ_SEED) \
		GRIDHA_SUITE_TIMEOUT=$$(($(FUZZ_SECONDS) + 900)) bash test/run.sh

# The soak at scale, long version: three workers, 100,000 services, a few
# hundred busy, for SOAK_SECONDS (make test runs 120 s of it), with
# autovacuum and pruning; sizes and lease ages every few seconds
# (test/t/042_scale_soak.pl).
SOAK_SECONDS ?= 900
soak:
	GRIDHA_ONLY=042_scale_soak SCALE_SOAK_SECONDS=$(SOAK_SECONDS) \
		GRIDHA_SUITE_TIMEOUT=$$(($(SOAK_SECONDS) + 900)) bash test/run.sh
