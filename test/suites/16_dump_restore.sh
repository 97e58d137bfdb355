#!/usr/bin/env bash
# test/suites/16_dump_restore.sh: logical backups keep everything that
# matters (DESIGN.md section 9): a database taken with pg_dump while gridha
# works, restored into another cluster, carries on where the dump left it.
#
# Steps, in the order they run:
#
#   live      database gridha_dump on the suite's cluster, restarted with two
#             background workers serving it, and the reference client
#             (client/gridha-client), both against the test ledger
#             (test/dlt/ledger.py: a 2 s commit delay keeps batches
#             pending, '^bad-' batches end INVALID, every request must
#             carry the header X-Test-Token: dump-default). The 'default'
#             target is changed (rate_burst, reject_codes, request_headers),
#             a second target has headers of its own and a rate limit, a
#             third, 'gated', points at a closed port (its batches are
#             delayed, again and again); an id sequence has ids reserved
#             (the set is kept), a leader lease has a tick. 20 services x
#             8 batches, 5 more on 'gated'; an instance X, in a psql session
#             of its own, holds five services whose heads it leaves
#             submitting, pending, valid, unknown and delayed (the test
#             ledger never answers VALID, and the others are fleeting in a
#             live run), on a fourth target, 'xheld', which has neither URL
#             nor function: no worker can serve it, so none takes them; the
#             test POSTs X's submitting head for it, as if X's report were
#             lost.
#   dump      mid-run, with the workers, the client and X live and POSTs
#             under way (the ledger now holds its answers for 6 s, and a
#             new service's head has just arrived there): its session locks
#             gridha.batches (SHARE: no batch can change from then on),
#             exports its snapshot, and under it takes pg_dump -Fc, pg_dump
#             in plain format and the record of what they hold
#             (test/dba/dump_state.sql: every batch with every column,
#             claims, instances, targets, leases, ticks, id sequences and
#             windows, rate state); batches in every status, some
#             submitting with their POST at the ledger.
#   stop      still under that lock, the client and X are killed and the
#             cluster is stopped (immediate: no backend commits anything
#             more), then started again without workers. The old run ends
#             exactly at the dump, as when a database moves to another
#             cluster: the old database holds the record's batches, and
#             every POST the ledger applied after the lock is of a batch the
#             dump holds as submitting. From here on the backup is all that
#             is left of that run.
#   restore   a second, fresh cluster (test/dba/cluster2.sh), started
#             without workers: createdb and pg_restore -d of the custom
#             dump into gridha_dump, psql -f of the plain dump into
#             gridha_dump_plain. Both equal the record, row for row, and
#             each other.
#   drain     'gated' and 'xheld' get the ledger's URLs in the restored
#             database; the second cluster restarts with two workers
#             serving it, against the same ledger, until every batch is
#             final. Then: per-service order at the ledger intact across
#             the restore (check_log.py, expected = the enqueue order the
#             dump holds); every duplicate POST explained (see
#             "duplicates" below); no epoch went back, and every hand-out
#             after the restore, at the ledger and in the table, has an
#             epoch above the dump's; ids reserved before the dump are
#             never handed out by reserve_ids/next_id after the restore.
#
# What the restore does with claims, instances and leases: they come back
# exactly as they were (gridha.service_claims, gridha.instances and
# gridha.leases are dumped with their rows), and the service counts are
# rebuilt from the claims. Nothing of the old cluster runs in the new one:
# the old instances' leases run out (the workers' and the client's at once,
# their expiries being seconds long and past by the time the restore is
# served; X's, a minute long, is moved to 30 s after the restore by the
# test), and the new workers take their claims over with a new epoch. The
# liveness key of every old instance names a session that does not exist in
# the new cluster, so each claim with nothing submitting is taken at once,
# without waiting for its lease; only a head that was submitting waits for
# the old lease's hard expiry, and is then handed out again.
#
# Duplicates: the ledger counts a POST of a batch id it has accepted before
# as a duplicate. After a restore a batch is POSTed twice exactly when its
# first POST reached the ledger but the dump does not know it: the dump
# holds it handed out and not final (submitting: the POST under way or done,
# its report not yet written; delayed after a timeout would be another
# case). The old run ends at the dump (see stop), so every duplicate POST
# must come from the new cluster, of a batch first accepted by the old one,
# that the dump holds in flight: submitting, pending, valid, delayed or
# unknown. X's head and the POSTs whose answers the ledger holds make sure
# there are such batches. (A database that goes on serving after its dump hands out
# more: a restore POSTs those batches again too; the README says so.)
#
# Every wait is a bounded poll. The suite's cluster is left with the phase 2
# settings; the second cluster, the ledger, the client and the databases
# are removed on any exit (the second cluster kept with GRIDHA_KEEP_TMP=1).
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
WORK=${GRIDHA_SUITE_DIR:-$(mktemp -d /tmp/gridha-dump.XXXXXX)}
LIB=${GRIDHA_LIB:-$REPO/test/lib.sh}
DBA=$REPO/test/dba
CLIENT=$REPO/client/gridha-client
DB=gridha_dump
PLAIN=gridha_dump_plain
FAILED=0
PIDS=()
RESTARTED=0
# Every session prints timestamps alike (the record and the restored state
# are compared as text).
export PGTZ=UTC

# Claim timings of both clusters: leases of seconds, so that the old
# instances' leases are long past when the restored database is served.
TIMING="gridha.soft_expiry=4s gridha.hard_expiry=10s gridha.renew_interval=1s
	gridha.naptime=200ms gridha.monitor_interval=200ms gridha.submit_timeout=8s"
WORKER_OPTS="gridha.workers=2 gridha.database=$DB $TIMING"
# The live run's cluster commits synchronously: the test clusters run with
# synchronous_commit = off (test/lib.sh), under which a transaction is
# visible (to the dump's snapshot too) before its commit record reaches the
# WAL, so the immediate stop at "stop" may lose a hand-out the dump holds
# (seen once: f1-b1 submitting in the record, queued after the restart).
# With it on, whatever the snapshot sees is in the WAL before the stop, and
# "the old database ends with exactly the batches the dump holds" holds.
DURABLE_OPTS="synchronous_commit=on"

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$LIB"
# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"
plan 45
# shellcheck source-path=SCRIPTDIR source=../dba/cluster2.sh
. "$DBA/cluster2.sh"

psql_db() {
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$DB" "$@"
}

# c2_db ARG...: psql to the restored database in the second cluster.
c2_db() {
	c2_psql -d "$DB" "$@"
}

# sql_is EXPECTED SQL / c2_is EXPECTED SQL: the query prints exactly EXPECTED.
sql_is() {
	[ "$(psql_db -c "$2" 2>/dev/null)" = "$1" ]
}
c2_is() {
	[ "$(c2_db -c "$2" 2>/dev/null)" = "$1" ]
}

# c2_check_is EXPECTED WHAT SQL: one TAP line for a query of the restored
# database; on failure what it printed.
c2_check_is() {
	local got
	got=$(c2_db -c "$3" 2>&1)
	if [ "$got" = "$1" ]; then
		ok "$2"
	else
		not_ok "$2"
		printf 'expected: %s\ngot: %s\n' "$1" "$got" | head -n 30 | diag
	fi
}

# same_files WHAT A B: ok when the files are equal (and not empty), else
# not_ok with the diff.
same_files() {
	if [ -s "$2" ] && diff -u "$2" "$3" >"$WORK/diff.out" 2>&1; then
		ok "$1"
	else
		not_ok "$1"
		head -n 40 "$WORK/diff.out" | diag
	fi
}

cleanup() {
	suite_stop_pids
	c2_cleanup
	suite_restore_cluster
	psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1
}
trap cleanup EXIT

if [ -z "${PGDATA:-}" ] || [ -z "${GRIDHA_PGLOG:-}" ]; then
	not_ok "the suite runs inside test/run.sh (PGDATA and GRIDHA_PGLOG are set)"
	exit 1
fi
if [ ! -x "$CLIENT" ]; then
	not_ok "client/gridha-client is built (run make)"
	exit 1
fi

# ---------------------------------------------------------------------------
# live: the database, the workers, X, the services, the client

start_ledger --commit-delay 2 --invalid-pattern '^bad-' --max-lifetime 600 \
	--require-header 'X-Test-Token: dump-default'

# The second cluster is made now (initdb takes a while) and started only
# for the restore.
if ! c2_init >"$WORK/c2_init.out" 2>&1; then
	not_ok "the second cluster's initdb"
	diag <"$WORK/c2_init.out"
	exit 1
fi

psql -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB" \
	-c "CREATE DATABASE $DB" >/dev/null || exit 1
psql_db >/dev/null <<EOF || exit 1
CREATE EXTENSION gridha;

UPDATE gridha.targets
   SET submit_url = '$LEDGER/batches/{service_id}/{batch_id}',
       status_url = '$LEDGER/batch_statuses?id={batch_ids}',
       rate_burst = 3,
       reject_codes = '{400,409,422}',
       request_headers = '{"X-Test-Token": "dump-default"}'
 WHERE target = 'default';
INSERT INTO gridha.targets (target, submit_url, status_url, reject_codes, request_headers,
                            rate_interval, rate_burst)
VALUES ('splinter', '$LEDGER/batches/{service_id}/{batch_id}',
        '$LEDGER/splinter/batch_statuses?ids={batch_ids}', '{400}',
        '{"Authorization": "Bearer dump-splinter", "X-Tenant": "sixteen", "X-Test-Token": "dump-default"}',
        '50 milliseconds', 2);
INSERT INTO gridha.targets (target, submit_url, status_url, request_headers)
VALUES ('gated', 'http://127.0.0.1:9/batches/{service_id}/{batch_id}',
        'http://127.0.0.1:9/batch_statuses?id={batch_ids}', '{"X-Test-Token": "dump-default"}');
INSERT INTO gridha.targets (target, request_headers) VALUES ('xheld', '{"X-Test-Token": "dump-default"}');

SELECT gridha.create_id_sequence('orders', 1000, 2);
SELECT gridha.try_lead('00000000-0000-0000-0000-00000000d017');
SELECT outcome FROM gridha.run_maintenance('00000000-0000-0000-0000-00000000d017');
EOF

# Ids reserved before the dump: three blocks and 15 single ids (blocks of
# 5 for this backend's next_id), kept as ranges in ids-before.txt.
psql_db -o "$WORK/ids-before.txt" >/dev/null <<'EOF' || exit 1
SET gridha.id_block_size = 5;
SELECT gridha.reserve_ids('orders', n)::text FROM (VALUES (10), (25), (400)) v (n);
SELECT int8range(i, i, '[]')::text FROM (SELECT gridha.next_id('orders') AS i FROM generate_series(1, 15)) x;
EOF

RESTARTED=1
# shellcheck disable=SC2086 # the options are words
if ! gridha_cluster_restart $SUITE_CLUSTER_OPTS $WORKER_OPTS $DURABLE_OPTS; then
	not_ok "the cluster restarted with two workers serving $DB"
	exit 1
fi
wait_until 30 sql_is 2 "SELECT count(*) FROM gridha.workers WHERE instance_id IS NOT NULL"
check $? "live: two background workers serve $DB"

# X: its services are created, claimed and their heads handed out in one
# transaction, so nobody else can take them first. They are on 'xheld',
# which no worker can serve: workers below their fair share take the idle
# heads of an instance above it (unknown and delayed are idle: ready to be
# handed out again), and under load they took x-unk and x-del before the
# check below saw them. Its lease is 60 s and its session stays open, so
# the live cluster leaves them alone until the dump.
cat >"$WORK/x.sql" <<'EOF'
\set ON_ERROR_STOP 1
SET gridha.soft_expiry = '60s';
SET gridha.hard_expiry = '60s';
SET gridha.balance_claims = off;
SELECT gridha.register_instance('x') AS x \gset
BEGIN;
SELECT count(gridha.enqueue(s, s || '-b' || b, convert_to(s || ' batch ' || b, 'UTF8'), 'xheld'))
  FROM unnest(ARRAY['x-sub', 'x-pend', 'x-valid', 'x-unk', 'x-del']) s, generate_series(1, 2) b;
SELECT count(*) FROM gridha.acquire_claims(:'x');
CREATE TEMP TABLE h AS SELECT * FROM gridha.next_batches(:'x', 10);
COMMIT;
SELECT gridha.report_submission(:'x', service_id, batch_id, epoch, 'accepted')
  FROM h WHERE service_id IN ('x-pend', 'x-valid', 'x-unk');
SELECT gridha.report_status(:'x', service_id, batch_id, epoch, 'VALID') FROM h WHERE service_id = 'x-valid';
SELECT gridha.report_status(:'x', service_id, batch_id, epoch, 'UNKNOWN') FROM h WHERE service_id = 'x-unk';
SELECT gridha.report_submission(:'x', service_id, batch_id, epoch, 'delayed', 'held back by the test')
  FROM h WHERE service_id = 'x-del';
SELECT pg_sleep(300);
EOF
psql_db -f "$WORK/x.sql" >"$WORK/x.out" 2>&1 &
X_PID=$!
PIDS+=("$X_PID")
x_ready() {
	sql_is "x-del|delayed x-pend|pending x-sub|submitting x-unk|unknown x-valid|valid" \
		"SELECT string_agg(service_id || '|' || status, ' ' ORDER BY service_id)
		   FROM gridha.batches WHERE batch_id LIKE 'x-%-b1'"
}
wait_until 20 x_ready
check $? "live: X holds heads submitting, pending, valid, unknown and delayed"

# 20 services x 8 batches, in rounds; s01-s03 begin with a batch the
# ledger finds INVALID; s16-s20 go to the Splinter-dialect target. And 5
# services d01-d05 x 2 batches on the target 'gated', whose URL nobody
# answers (a closed port): their heads come back delayed at once, again and
# again, with a growing backoff, so they are delayed nearly all the time.
psql_db >/dev/null <<'EOF' || exit 1
SELECT count(gridha.enqueue(format('s%s', lpad(s::text, 2, '0')),
                            format('%ss%s-b%s', CASE WHEN b = 1 AND s <= 3 THEN 'bad-' ELSE '' END,
                                   lpad(s::text, 2, '0'), b),
                            convert_to(format('payload %s/%s', s, b), 'UTF8'),
                            CASE WHEN s > 15 THEN 'splinter' END))
  FROM generate_series(1, 8) b, generate_series(1, 20) s;
SELECT count(gridha.enqueue('d0' || s, format('d0%s-b%s', s, b), '\x0d', 'gated'))
  FROM generate_series(1, 2) b, generate_series(1, 5) s;
EOF

"$CLIENT" --dsn "dbname=$DB" --label dump-client --idle-sleep-ms 100 --monitor-interval-ms 200 \
	--submit-timeout-ms 8000 --max-runtime-s 150 --log "$WORK/client.log" 2>"$WORK/client.err" &
CLIENT_PID=$!
PIDS+=("$CLIENT_PID")

under_way() {
	sql_is t "SELECT count(*) FILTER (WHERE status = 'committed') >= 25
	                 AND count(*) FILTER (WHERE status = 'invalid') = 3
	            FROM gridha.batches"
}
wait_until 40 under_way
check $? "live: the workers and the client commit batches (25 or more) and 3 end invalid"
psql_db -c "SELECT status, count(*) FROM gridha.batches GROUP BY 1 ORDER BY 1" | diag

gated_delayed() {
	sql_is t "SELECT count(*) >= 4 FROM gridha.batches
	           WHERE service_id LIKE 'd0%' AND status = 'delayed' AND attempts >= 3"
}
wait_until 30 gated_delayed
check $? "live: the heads of the 'gated' target, which nobody answers, are delayed (4 or more, after 3 attempts or more)"
psql_db -c "SELECT DISTINCT detail FROM gridha.batches WHERE service_id LIKE 'd0%' AND status = 'delayed'" | diag

# X's POST of its submitting head reaches the ledger (X's report never
# will): the dump holds it submitting, the ledger has it.
read -r XSUB_EPOCH XSUB_ATTEMPT <<<"$(psql_db -F ' ' -c "SELECT epoch, attempts FROM gridha.batches
                                                        WHERE batch_id = 'x-sub-b1' AND status = 'submitting'")"
python3 - "$LEDGER/batches/x-sub/x-sub-b1" "${XSUB_EPOCH:-0}" "${XSUB_ATTEMPT:-0}" >"$WORK/x-post.out" 2>&1 <<'EOF'
import sys, urllib.request
req = urllib.request.Request(sys.argv[1], data=b"x-sub batch 1", method="POST",
                             headers={"X-Gridha-Epoch": sys.argv[2], "X-Gridha-Attempt": sys.argv[3],
                                      "X-Test-Token": "dump-default"})
print(urllib.request.urlopen(req, timeout=10).read().decode())
EOF
grep -q '"result": "accepted"' "$WORK/x-post.out"
check $? "live: X's POST of its submitting head x-sub-b1 is accepted by the ledger"

# ---------------------------------------------------------------------------
# dump: custom and plain format, and the record, under one snapshot taken
# once no batch can change

# A stall window at the ledger (POSTs applied as they arrive, every answer
# held for 6 s), and five new services f1-f5: once the ledger has accepted
# the POST of one of their heads, the dump locks gridha.batches, seconds
# before the answer can reach its worker, whose report then waits for the
# lock. The dump holds that batch submitting, and the ledger has it.
ledger_control '{"stall_for": 60, "stall_seconds": 6, "stall_apply": "before"}'
psql_db -c "SELECT count(gridha.enqueue('f' || s, format('f%s-b%s', s, b), '\\x0f'))
            FROM generate_series(1, 2) b, generate_series(1, 5) s" >/dev/null
f_arrived() {
	grep -q '"event":"post","service_id":"f[1-5]","batch_id":"f[1-5]-b1".*"result":"accepted"' "$WORK/ledger.log"
}
wait_until 30 f_arrived
check $? "dump: POSTs under way as it is taken (the ledger accepted a new service's head, its answer held)"

STATE_SQL=$(cat "$DBA/dump_state.sql")
cat >"$WORK/dump.psql" <<EOF
\\set ON_ERROR_STOP 1
BEGIN ISOLATION LEVEL REPEATABLE READ;
LOCK TABLE gridha.batches IN SHARE MODE;
\\! wc -l <"$WORK/ledger.log" >"$WORK/mark"
SELECT pg_export_snapshot() AS snapshot \\gset
\\setenv GRIDHA_DUMP_SNAPSHOT :snapshot
\\! pg_dump -Fc --snapshot="\$GRIDHA_DUMP_SNAPSHOT" -f "$WORK/dump.custom" $DB 2>"$WORK/pg_dump.err"; echo \$? >"$WORK/pg_dump.rc"
\\! pg_dump --snapshot="\$GRIDHA_DUMP_SNAPSHOT" -f "$WORK/dump.sql" $DB 2>>"$WORK/pg_dump.err"; echo \$? >>"$WORK/pg_dump.rc"
\\o $WORK/record.tsv
COPY ($STATE_SQL) TO STDOUT;
\\o
\\! touch "$WORK/dumped"
SELECT pg_sleep(120);
EOF
start=$SECONDS
psql_db -f "$WORK/dump.psql" >"$WORK/dump.out" 2>&1 &
DUMP_PID=$!
PIDS+=("$DUMP_PID")
dump_over() {
	[ -e "$WORK/dumped" ] || ! kill -0 "$DUMP_PID" 2>/dev/null
}
wait_until 90 dump_over
[ -e "$WORK/dumped" ] && [ "$(paste -sd, "$WORK/pg_dump.rc" 2>/dev/null)" = "0,0" ] &&
	[ -s "$WORK/dump.custom" ] && [ -s "$WORK/dump.sql" ] && [ -s "$WORK/record.tsv" ] && [ -s "$WORK/mark" ]
dump_rc=$?
check $dump_rc "dump: pg_dump -Fc and plain mid-run, and the record, under one exported snapshot, gridha.batches locked ($((SECONDS - start)) s)"
MARK=$(cat "$WORK/mark" 2>/dev/null || echo 0)

# ---------------------------------------------------------------------------
# stop: the old run ends at the dump; the backup is what is left

kill -KILL "$CLIENT_PID" "$X_PID" 2>/dev/null
wait "$CLIENT_PID" 2>/dev/null
wait "$X_PID" 2>/dev/null
gridha_cluster_stop immediate
stop_rc=$?
kill -KILL "$DUMP_PID" 2>/dev/null
wait "$DUMP_PID" 2>/dev/null
# shellcheck disable=SC2086 # the options are words
gridha_cluster_start $SUITE_CLUSTER_OPTS $DURABLE_OPTS && RESTARTED=1 && [ "$stop_rc" -eq 0 ]
check $? "stop: the client and X killed, the cluster stopped (immediate) with the dump's lock held, then started without workers"
if [ "$dump_rc" -ne 0 ]; then
	cat "$WORK/dump.out" "$WORK/pg_dump.err" 2>/dev/null | diag
	exit 1
fi
ledger_control '{"clear": true}'

# kind_of FILE KIND: the rows of one kind of a state file.
kind_of() {
	awk -F'\t' -v k="$2" '$1 == k' "$1"
}
# statuses FILE: "status count" of the batches of a state file.
statuses() {
	kind_of "$1" batch | python3 -c '
import collections, json, sys
order = ["queued", "submitting", "pending", "valid", "delayed", "unknown", "committed", "invalid"]
n = collections.Counter(json.loads(l.split("\t")[2])["status"] for l in sys.stdin)
print(" ".join("%s %d" % (s, n[s]) for s in order if n[s]))'
}
HELD=$(statuses "$WORK/record.tsv")
echo "the dump holds: $HELD" | diag
n=0
for s in queued submitting pending valid delayed unknown committed invalid; do
	case " $HELD " in *" $s "*) n=$((n + 1)) ;; esac
done
[ "$n" -eq 8 ]
check $? "dump: it holds batches in every status ($n of 8)"
# (grep -c reads to the end: no broken pipe under pipefail)
kind_of "$WORK/record.tsv" batch | grep -c '"status": "delayed", [^}]*"service_id": "d0' >/dev/null
check $? "dump: it holds batches delayed by the workers (the 'gated' target's)"

# The old database, after the stop, holds exactly the batches of the
# record: nothing changed a batch after the dump's snapshot.
psql_db -c "COPY ($STATE_SQL) TO STDOUT" >"$WORK/old.tsv" 2>&1
kind_of "$WORK/record.tsv" batch >"$WORK/record.batch"
kind_of "$WORK/old.tsv" batch >"$WORK/old.batch"
if [ -s "$WORK/record.batch" ] && diff -u "$WORK/record.batch" "$WORK/old.batch" >"$WORK/diff.out" 2>&1; then
	ok "stop: the old database ends with exactly the batches the dump holds: the old run ended at the dump"
else
	not_ok "stop: the old database ends with exactly the batches the dump holds: the old run ended at the dump"
	head -n 40 "$WORK/diff.out" | diag
fi

# after_lock: the POSTs the ledger applied after the dump's lock was taken
# (accepted or duplicate), each as "batch result status-in-the-dump".
after_lock() {
	python3 - "$WORK/record.tsv" "$WORK/ledger.log" "$MARK" <<'EOF'
import json, sys
status = {}
for line in open(sys.argv[1]):
    kind, key, val = line.rstrip("\n").split("\t", 2)
    if kind == "batch":
        status[key] = json.loads(val)["status"]
for line in open(sys.argv[2]):
    e = json.loads(line)
    if (e["seq"] > int(sys.argv[3]) and e["event"] == "post"
            and e.get("result") in ("accepted", "duplicate")):
        key = "%s/%s" % (e["service_id"], e["batch_id"])
        print(key, e["result"], status.get(key, "(not in the dump)"))
EOF
}
after_lock >"$WORK/after_lock.txt"
n_after=$(grep -c . "$WORK/after_lock.txt")
! grep -v ' accepted submitting$' "$WORK/after_lock.txt" >/dev/null
check $? "stop: every POST the ledger applied after the dump's lock ($n_after) was accepted, of a batch the dump holds as submitting"
grep -v ' accepted submitting$' "$WORK/after_lock.txt" | head -n 10 | diag

# in_flight_posted: the batches the dump holds as submitting whose POST
# the ledger has accepted (their reports were still to come), X's aside.
in_flight_posted() {
	python3 - "$WORK/record.tsv" "$WORK/ledger.log" <<'EOF'
import json, sys
submitting = set()
for line in open(sys.argv[1]):
    kind, key, val = line.rstrip("\n").split("\t", 2)
    if kind == "batch" and json.loads(val)["status"] == "submitting":
        submitting.add(key)
for line in open(sys.argv[2]):
    e = json.loads(line)
    if e["event"] == "post" and e.get("result") == "accepted":
        key = "%s/%s" % (e["service_id"], e["batch_id"])
        if key in submitting and not key.startswith("x-"):
            print(key)
EOF
}
n_posted=$(in_flight_posted | grep -c .)
[ "$n_posted" -gt 0 ]
check $? "dump: it holds batches submitting whose POST the ledger accepted, their reports still to come ($n_posted, X's aside)"

# ---------------------------------------------------------------------------
# restore: a second cluster, both formats

# shellcheck disable=SC2086 # the options are words
if ! c2_start $TIMING; then
	not_ok "restore: the second cluster started"
	exit 1
fi
ok "restore: the second cluster started (port $C2_PORT)"
c2_psql -d postgres -c "CREATE DATABASE $DB" -c "CREATE DATABASE $PLAIN" >/dev/null || exit 1

start=$SECONDS
pg_restore -h "$C2_DIR" -p "$C2_PORT" -U postgres -d "$DB" --exit-on-error "$WORK/dump.custom" \
	>"$WORK/pg_restore.out" 2>&1
rc=$?
check $rc "restore: pg_restore -d of the custom dump into a fresh database ($((SECONDS - start)) s)"
[ "$rc" -eq 0 ] || diag <"$WORK/pg_restore.out"
c2_psql -d "$PLAIN" -f "$WORK/dump.sql" >"$WORK/plain_restore.out" 2>&1
rc=$?
check $rc "restore: psql -f of the plain dump into another fresh database"
[ "$rc" -eq 0 ] || tail -n 20 "$WORK/plain_restore.out" | diag

c2_psql -d "$DB" -c "COPY ($STATE_SQL) TO STDOUT" >"$WORK/restored.tsv" 2>&1
c2_psql -d "$PLAIN" -c "COPY ($STATE_SQL) TO STDOUT" >"$WORK/restored-plain.tsv" 2>&1

# restored_same KIND WHAT: the restored rows of KIND equal the record's.
restored_same() {
	kind_of "$WORK/record.tsv" "$1" >"$WORK/record.$1"
	kind_of "$WORK/restored.tsv" "$1" >"$WORK/restored.$1"
	same_files "restore: $2 ($(wc -l <"$WORK/record.$1") rows)" "$WORK/record.$1" "$WORK/restored.$1"
}
restored_same batch "every batch restored with its seq, status, payload, attempts, epoch, created_at and other columns"
echo "restored: $(statuses "$WORK/restored.tsv")" | diag
restored_same target "every target row restored, the changed default row and the request_headers included"
c2_check_is "3|{400,409,422}|{\"X-Test-Token\": \"dump-default\"}" \
	"restore: the default row is the dumped one, not the one CREATE EXTENSION makes" \
	"SELECT concat_ws('|', rate_burst, reject_codes, request_headers) FROM gridha.targets WHERE target = 'default'"
restored_same id_sequence "every id sequence restored with its high water"
restored_same id_window "every id window restored"
restored_same serial "the id sequences' serial restored"
restored_same claim "claims restored as they were: claimant, epoch, queue state, expiries"
restored_same instance "instances restored as they were, with their leases and liveness keys"
restored_same lease "leader leases restored"
restored_same tick "maintenance ticks restored"
restored_same rate_state "rate state restored"
c2_check_is "t" "restore: the service counts are rebuilt from the restored claims" \
	"SELECT (SELECT sum(services) FROM gridha.service_counts) = (SELECT count(*) FROM gridha.service_claims)"
c2_check_is "0" "restore: every instance's held equals its restored claims" \
	"SELECT count(*) FROM gridha.instances i
	  WHERE held <> (SELECT count(*) FROM gridha.service_claims c WHERE c.claimant = i.instance_id)"
c2_check_is "true|0" "restore: gridha.metrics' counters are the sums over the restored services (settled totals and services restored together)" \
	"SELECT (SELECT sum(committed_total) > 0 FROM gridha.metrics WHERE scope = 'target') || '|' || count(*)
	   FROM gridha.metrics m
	   JOIN (SELECT target, sum(tail_seq) AS e, sum(committed_total) AS c, sum(invalid_total) AS i,
	                sum(resubmitted_total) AS r
	           FROM gridha.service_claims GROUP BY target) s USING (target)
	  WHERE m.scope = 'target'
	    AND (m.enqueued_total, m.committed_total, m.invalid_total, m.resubmitted_total)
	        IS DISTINCT FROM (s.e, s.c, s.i, s.r)"
same_files "restore: the plain-format restore holds the same batches, claims, targets, instances and ids as the custom one" \
	"$WORK/restored.tsv" "$WORK/restored-plain.tsv"

# ---------------------------------------------------------------------------
# drain: workers serve the restored database against the same ledger

# The operator points the 'gated' and 'xheld' targets at the ledger, in the
# restored database (their services drain with the others, with the token
# restored).
[ "$(c2_db -c "WITH u AS (UPDATE gridha.targets SET submit_url = '$LEDGER/batches/{service_id}/{batch_id}',
                                                  status_url = '$LEDGER/batch_statuses?id={batch_ids}'
                        WHERE target IN ('gated', 'xheld') RETURNING 1)
               SELECT count(*) FROM u")" = 2 ]
check $? "drain: the 'gated' and 'xheld' targets pointed at the ledger in the restored database"
# X's lease is moved to 30 s from now (however long the restore took), so
# that its idle heads can show they are taken before it runs out, and its
# submitting head is taken when it does.
X_LEASE=$(c2_db -c "UPDATE gridha.instances SET soft_expiry = now() + interval '30 s',
                                                hard_expiry = now() + interval '30 s'
                     WHERE label = 'x' RETURNING soft_expiry")
MARK_DRAIN=$(wc -l <"$WORK/ledger.log")
# shellcheck disable=SC2086 # the options are words
c2_restart $TIMING gridha.workers=2 gridha.database="$DB" &&
	wait_until 30 c2_is 2 "SELECT count(*) FROM gridha.workers WHERE instance_id IS NOT NULL"
check $? "drain: the second cluster restarted with two workers serving the restored database"
WORKERS_AT=$(c2_psql -d postgres -c "SELECT now()")

N_BATCHES=$(kind_of "$WORK/record.tsv" batch | wc -l)
all_final() {
	c2_is "$N_BATCHES" "SELECT count(*) FROM gridha.batches WHERE status IN ('committed', 'invalid')"
}
start=$SECONDS
wait_until 90 all_final
check $? "drain: every batch reaches a final status ($N_BATCHES batches, $((SECONDS - start)) s)"
c2_db -c "SELECT status, count(*) FROM gridha.batches GROUP BY 1 ORDER BY 1" | diag
c2_check_is "t" "drain: exactly the '^bad-' batches end invalid, every other committed" \
	"SELECT bool_and((status = 'invalid') = (batch_id ~ '^bad-')) FROM gridha.batches"

# The record and the ledger's log, beside the restored data (a schema of
# the test's own).
c2_db >"$WORK/scratch.out" 2>&1 <<EOF
CREATE SCHEMA dump_scratch;
CREATE TABLE dump_scratch.record (kind text, key text, val jsonb);
\\copy dump_scratch.record FROM '$WORK/record.tsv'
CREATE TABLE dump_scratch.ledger_log (e jsonb);
\\copy dump_scratch.ledger_log FROM '$WORK/ledger.log' WITH (FORMAT csv, QUOTE e'\\x01', DELIMITER e'\\x02')
CREATE TABLE dump_scratch.ids (phase text, ids int8range);
\\copy dump_scratch.ids (ids) FROM '$WORK/ids-before.txt'
UPDATE dump_scratch.ids SET phase = 'before';
CREATE VIEW dump_scratch.dump_epoch AS
SELECT key AS service_id, (val->>'epoch')::bigint AS epoch FROM dump_scratch.record WHERE kind = 'claim';
EOF
check $? "the record, the ledger log and the ids reserved before the dump loaded beside the restored data"

c2_db -F $'\t' -c "SELECT val->>'service_id', val->>'batch_id' FROM dump_scratch.record
                   WHERE kind = 'batch' ORDER BY 1, (val->>'seq')::bigint" >"$WORK/expected.tsv"
check_ledger_order "$WORK/expected.tsv" "$WORK/ledger.log" \
	"drain: each service's batches arrived at the ledger in enqueue order across the restore, one in flight"

c2_check_is "0" "drain: no service's epoch is below the dump's" \
	"SELECT count(*) FROM dump_scratch.dump_epoch d JOIN gridha.service_claims c USING (service_id)
	  WHERE c.epoch < d.epoch"
c2_check_is "0" "drain: the old cluster's instances hold no claim; the new workers took over" \
	"SELECT count(*) FROM gridha.service_claims c
	   JOIN dump_scratch.record r ON r.kind = 'instance' AND r.key = c.claimant::text"
c2_check_is "0|true" "drain: every batch handed out after the restore carries an epoch above its service's in the dump" \
	"SELECT count(*) FILTER (WHERE b.epoch <= d.epoch) || '|' || (count(*) > 0)::text
	   FROM gridha.batches b
	   JOIN dump_scratch.record r ON r.kind = 'batch' AND r.key = b.service_id || '/' || b.batch_id
	   JOIN dump_scratch.dump_epoch d ON d.service_id = b.service_id
	  WHERE b.attempts > (r.val->>'attempts')::int"
c2_check_is "0|true" "drain: every POST the ledger saw from the new cluster carries an epoch above the dump's" \
	"SELECT count(*) FILTER (WHERE (l.e->>'epoch')::bigint <= d.epoch) || '|' || (count(*) > 0)::text
	   FROM dump_scratch.ledger_log l
	   JOIN dump_scratch.dump_epoch d ON d.service_id = l.e->>'service_id'
	  WHERE l.e->>'event' = 'post' AND l.e->>'result' IN ('accepted', 'duplicate')
	    AND (l.e->>'seq')::bigint > $MARK_DRAIN"

# Duplicates (see the header): each with its seq, the seq of the POST the
# ledger accepted first, and the batch's status in the dump.
DUPS_SQL="SELECT l.e->>'batch_id' AS batch_id, (l.e->>'seq')::bigint AS seq,
                 (l.e->>'first_seq')::bigint AS first_seq,
                 r.val->>'status' AS dump_status
            FROM dump_scratch.ledger_log l
            LEFT JOIN dump_scratch.record r ON r.kind = 'batch'
                 AND r.key = (l.e->>'service_id') || '/' || (l.e->>'batch_id')
           WHERE l.e->>'event' = 'post' AND l.e->>'result' = 'duplicate'"
n_dups=$(c2_db -c "SELECT count(*) FROM ($DUPS_SQL) d")
c2_db -c "SELECT coalesce(dump_status, '(not in the dump)'), count(*) FROM ($DUPS_SQL) d GROUP BY 1" | diag
c2_check_is "0|true" "drain: every duplicate POST ($n_dups) is of a batch in flight at the dump (handed out, not final), POSTed again by the new cluster after the old one's POST" \
	"SELECT count(*) FILTER (WHERE d.seq <= $MARK_DRAIN OR d.first_seq > $MARK_DRAIN
	                           OR NOT coalesce(d.dump_status = ANY (ARRAY['submitting', 'pending', 'valid',
	                                                                    'delayed', 'unknown']), false))
	        || '|' || (count(*) > 0)::text
	   FROM ($DUPS_SQL) d"

# X's heads: the one submitting in the dump is handed out again under a
# new epoch once X's lease is past its hard expiry; the idle ones are taken
# at once, X's session being gone (shown unless the workers started only
# after X's lease ran out: a very slow machine).
c2_check_is "t" "drain: X's head that was submitting in the dump was handed out again, one attempt and at least one epoch more" \
	"SELECT b.attempts = (r.val->>'attempts')::int + 1 AND b.epoch > (r.val->>'epoch')::bigint
	   FROM gridha.batches b JOIN dump_scratch.record r ON r.kind = 'batch' AND r.key = 'x-sub/x-sub-b1'
	  WHERE b.batch_id = 'x-sub-b1'"
if c2_is t "SELECT '$WORKERS_AT'::timestamptz < '$X_LEASE'::timestamptz"; then
	c2_check_is "t" "drain: X's idle heads (delayed, unknown, valid, pending) were taken before its lease ran out: its session is gone" \
		"SELECT bool_and(b.handed_out_at < '$X_LEASE'::timestamptz) AND count(*) = 4
		   FROM gridha.batches b
		  WHERE b.batch_id IN ('x-del-b1', 'x-unk-b1', 'x-valid-b1', 'x-pend-b1')"
else
	skip_test "drain: X's idle heads were taken before its lease ran out" "the workers started after it ran out"
fi

# Ids: reserve_ids and next_id on the restored side, in two sessions, then
# in no way an id reserved before the dump.
for i in 1 2; do
	c2_db >/dev/null <<'EOF' || not_ok "ids: reserve_ids and next_id on the restored database (session $i)"
INSERT INTO dump_scratch.ids (phase, ids)
SELECT 'after', gridha.reserve_ids('orders', n) FROM (VALUES (10), (300), (999), (5)) v (n);
INSERT INTO dump_scratch.ids (phase, ids)
SELECT 'after', int8range(i, i, '[]') FROM (SELECT gridha.next_id('orders') AS i FROM generate_series(1, 150)) x;
EOF
done
c2_check_is "18|0|true" "ids: no id reserved before the dump is handed out after the restore (reserve_ids and next_id)" \
	"SELECT count(*) FILTER (WHERE phase = 'before') || '|'
	        || (SELECT count(*) FROM dump_scratch.ids b JOIN dump_scratch.ids a
	             ON b.phase = 'before' AND a.phase = 'after' AND a.ids && b.ids) || '|'
	        || (count(*) FILTER (WHERE phase = 'after') = 308)::text
	   FROM dump_scratch.ids"

[ "$FAILED" -eq 0 ]
