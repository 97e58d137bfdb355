#!/usr/bin/env bash
# test/suites/27_upgrade_history.sh: an upgrade from 1.1 of a database with
# a long history (issue 28): GRIDHA_UPGRADE_HISTORY (2,000,000) final
# batches over 100 services, half of them finished 8 days ago (older than
# the default retention of 7 days), half a day ago, 10% invalid, some
# handed out twice; then 3 queued batches per service.
#
# ALTER EXTENSION gridha UPDATE (its time is printed, not judged), then:
# the version; no batch lost or changed (counts per status and a checksum
# of the seqs); the running totals that the queue views read start from the
# history (per service: committed, invalid and resubmitted as the batches
# say); the prune step's search goes through the new index
# batches_created (entries read about the batches pruned, no seq scan); prune steps at the default retention remove exactly the
# final batches older than 7 days and nothing else; the hand-out goes on
# (each service's head). Run alone it makes its own cluster.
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
LIB=${GRIDHA_LIB:-$REPO/test/lib.sh}
DB=gridha_upgrade_history
HISTORY=${GRIDHA_UPGRADE_HISTORY:-2000000}
FAILED=0

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$LIB"
# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"
plan 7
suite_work upgrade_history

psql_db() {
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$DB" "$@"
}

check_is() {
	local got
	got=$(psql_db -c "$3" 2>&1)
	if [ "$got" = "$1" ]; then
		ok "$2"
	else
		not_ok "$2"
		printf 'want: %s\ngot:  %s\n' "$1" "$got" | diag
	fi
}

cleanup() {
	[ "${GRIDHA_KEEP:-0}" = 1 ] ||
		psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1
}
trap cleanup EXIT

psql -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB" \
	-c "CREATE DATABASE $DB" -c "ALTER DATABASE $DB SET jit = off" >/dev/null || exit 1

t0=$SECONDS
if ! psql_db >/dev/null <<EOF; then
CREATE EXTENSION gridha VERSION '1.1';
-- 100 services, restored as a dump restores them: their rows, then their
-- history with its seqs, statuses and times
INSERT INTO gridha.service_claims (service_id, head_seq, tail_seq, ready_at)
SELECT 'u' || i, NULL, $HISTORY / 100, NULL FROM generate_series(1, 100) AS i;
INSERT INTO gridha.batches (service_id, batch_id, seq, payload, status, created_at, epoch,
                            attempts, handed_out_at, submitted_at, finished_at)
SELECT 'u' || i, 'h' || k, k, '\x00',
       CASE WHEN k % 10 = 0 THEN 'invalid' ELSE 'committed' END::gridha.batch_status,
       t, 1, 1 + (k % 7 = 0)::int, t, t, t
  FROM generate_series(1, 100) AS i
 CROSS JOIN generate_series(1, $HISTORY / 100) AS k
 CROSS JOIN LATERAL (SELECT now() - CASE WHEN k % 2 = 0 THEN interval '8 days' ELSE interval '12 hours' END
                              - k * interval '1 ms' AS t) x;
-- then 3 batches queued on each, through the enqueue trigger
INSERT INTO gridha.batches (service_id, batch_id, payload)
SELECT 'u' || i, 'q' || r, '\x01' FROM generate_series(1, 3) AS r, generate_series(1, 100) AS i
 ORDER BY r, i;
CREATE TABLE before AS
SELECT status, count(*) AS n, sum(seq) AS seqs FROM gridha.batches GROUP BY status;
CREATE TABLE kept AS
SELECT service_id, count(*) FILTER (WHERE status = 'committed') AS committed,
       count(*) FILTER (WHERE status = 'invalid') AS invalid,
       sum(greatest(attempts - 1, 0)) AS resubmitted,
       count(*) FILTER (WHERE status IN ('committed', 'invalid')
                          AND finished_at < now() - interval '7 days') AS old
  FROM gridha.batches GROUP BY service_id;
EOF
	not_ok "upgrade with history: the 1.1 database is filled"
	exit 1
fi
gridha_log "upgrade with history: $HISTORY final batches on 1.1 in $((SECONDS - t0)) s"

t0=$(date +%s.%N)
psql_db -c "ALTER EXTENSION gridha UPDATE" >"$WORK/update.log" 2>&1
rc=$?
t1=$(date +%s.%N)
gridha_log "upgrade with history: ALTER EXTENSION gridha UPDATE took $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s"
[ "$rc" -eq 0 ] || diag <"$WORK/update.log"
CURRENT=$(sed -n "s/^default_version *= *'\\([^']*\\)'.*/\\1/p" "$REPO/gridha.control")
check_is "$CURRENT" "upgrade with history: the database is on the current version ($CURRENT)" \
	"SELECT extversion FROM pg_extension WHERE extname = 'gridha'"

check_is "0" "upgrade with history: no batch lost or changed (counts per status, seqs)" \
	"SELECT count(*) FROM (SELECT status, count(*) AS n, sum(seq) AS seqs FROM gridha.batches GROUP BY status
	                       EXCEPT SELECT * FROM before) d"

check_is "100|0" "upgrade with history: each service's totals start from its history (committed, invalid, resubmitted)" \
	"SELECT count(*), count(*) FILTER (WHERE (c.committed_total, c.invalid_total, c.resubmitted_total)
	                                   IS DISTINCT FROM (k.committed, k.invalid, k.resubmitted))
	   FROM gridha.service_claims c JOIN kept k USING (service_id)"

check_is "100|0" "upgrade with history: service_queues shows the totals and 3 queued per service" \
	"SELECT count(*), count(*) FILTER (WHERE (q.committed, q.invalid, q.queued) IS DISTINCT FROM (k.committed, k.invalid, 3))
	   FROM gridha.service_queues q JOIN kept k USING (service_id)"

# prune steps at the default retention until none is left
t0=$(date +%s.%N)
psql_db >/dev/null <<'EOF'
CREATE PROCEDURE prune_all(INOUT total bigint DEFAULT 0)
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    LOOP
        n := gridha.prune_batches();
        total := total + n;
        COMMIT;
        EXIT WHEN n = 0;
    END LOOP;
END
$$;
EOF
stats() {
	psql_db -c "SELECT t.seq_scan, i.idx_tup_read
	              FROM pg_stat_user_tables t, pg_stat_user_indexes i
	             WHERE t.relid = 'gridha.batches'::regclass AND i.indexrelname = 'batches_created'"
}
s0=$(stats)
pruned=$(psql_db -c "CALL prune_all()")
t1=$(date +%s.%N)
sleep 1	# the pruning backend has exited: its statistics are in
s1=$(stats)
# the index entries the steps read: a step looks at twice its chunk at
# most and the next one walks on from the newest it deleted, so about
# twice the batches pruned (at most 3 times), never all the old ones at
# each step; and no seq scan
awk -v a="$s0" -v b="$s1" -v p="$pruned" 'BEGIN { split(a, x, "|"); split(b, y, "|");
	exit !(y[1] == x[1] && y[2] - x[2] >= p && y[2] - x[2] <= 3 * p) }'
check $? "upgrade with history: prune steps walk batches_created in order (entries read before|after: $s0 -> $s1 for $pruned pruned), no seq scan"
gridha_log "upgrade with history: $pruned pruned in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s"
check_is "0|0|300" "upgrade with history: prune steps at the default retention removed exactly the final batches older than 7 days ($pruned)" \
	"SELECT (SELECT sum(old) FROM kept) - $pruned,
	        (SELECT count(*) FROM gridha.batches WHERE status IN ('committed', 'invalid')
	            AND finished_at < now() - interval '7 days'),
	        (SELECT count(*) FROM gridha.batches WHERE status = 'queued')"

check_is "t" "upgrade with history: the hand-out goes on (services' heads, q1)" \
	"SELECT count(*) > 0 AND bool_and(batch_id = 'q1') FROM gridha.next_batches(gridha.register_instance('after'), 1000)"

[ "$FAILED" -eq 0 ]
