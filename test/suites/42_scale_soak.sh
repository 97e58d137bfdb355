#!/usr/bin/env bash
# test/suites/42_scale_soak.sh: three background workers hold 100,000
# services, a few hundred of them busy, for minutes, with autovacuum on and
# the maintenance tick pruning what is done.
#
# The cluster is restarted with three static workers serving this suite's
# database (claims: renew 2 s, soft expiry 10 s, hard 60 s; committed
# batches pruned 20 s after they end, a tick every 2 s; autovacuum with a
# 5 s naptime). Before the workers start, SCALE_SOAK_IDLE (100,000) idle
# services are made through the API: each had one batch, handed out and
# committed by a set-up instance that then handed them back. The workers
# take them all and share them. Then a producer enqueues, every
# SCALE_SOAK_ROUND_MS (2000), one batch for each of SCALE_SOAK_ACTIVE (300)
# services, for SCALE_SOAK_SECONDS (120; make soak: 900), and the workers
# submit them to the test ledger.
#
#   setup      the idle services exist; the workers register and hold every
#              service
#   renew      sampled every second: no worker's lease was renewed longer
#              ago than twice gridha.renew_interval (its lease would run out
#              at soft expiry, five intervals)
#   sizes      table and index sizes of batches, service_claims and
#              instances every 10 s (printed); from the middle of the run to
#              its end each grows by at most a fifth plus 1 MB: they level
#              off once pruning and autovacuum keep pace
#   drain      after the producer stops, every batch it enqueued reaches the
#              ledger in its service's order, one in flight per service, and
#              is committed or pruned; no idle service changed hands (no
#              claim expired under a busy worker)
#
# Works in a database of its own (gridha_scale_soak); restores the phase 2
# settings at the end.
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
LIB=${GRIDHA_LIB:-$REPO/test/lib.sh}
CHECK_LOG=$REPO/test/dlt/check_log.py
DB=gridha_scale_soak
FAILED=0
PIDS=()
RESTARTED=0

IDLE=${SCALE_SOAK_IDLE:-100000}
ACTIVE=${SCALE_SOAK_ACTIVE:-300}
DURATION=${SCALE_SOAK_SECONDS:-120}
ROUND_MS=${SCALE_SOAK_ROUND_MS:-2000}
RENEW_S=2

WORKER_OPTS="gridha.workers=3 gridha.database=$DB gridha.naptime=200ms
	gridha.monitor_interval=200ms gridha.submit_timeout=5s
	gridha.renew_interval=${RENEW_S}s gridha.soft_expiry=10s gridha.hard_expiry=60s
	gridha.retention=20s gridha.maintenance_interval=2s
	autovacuum=on autovacuum_naptime=5s"

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$LIB"
# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"
plan 7
suite_work scale_soak

psql_db() {
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$DB" "$@"
}

sql_is() {
	[ "$(psql_db -c "$2" 2>/dev/null)" = "$1" ]
}

cleanup() {
	suite_stop_pids
	suite_restore_cluster
	psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1
}
trap cleanup EXIT

start_ledger --commit-delay 0.1 --max-lifetime $((DURATION + 600))

# ---------------------------------------------------------------------------
# setup: idle services through the API, before the workers start

psql -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB" \
	-c "CREATE DATABASE $DB" >/dev/null || exit 1
t0=$(date +%s)
psql_db >/dev/null <<EOF || { not_ok "setup: the database and its idle services were made"; exit 1; }
CREATE EXTENSION gridha;
UPDATE gridha.targets
   SET submit_url = '$LEDGER/batches/{service_id}/{batch_id}',
       status_url = '$LEDGER/batch_statuses?id={batch_ids}'
 WHERE target = 'default';

-- what the producer enqueued, in order (the batches table is pruned)
CREATE TABLE soak_enqueued (service_id text, batch_id text, pos bigserial);
CREATE TABLE soak_epochs AS SELECT NULL::text AS service_id, NULL::bigint AS epoch LIMIT 0;

SET gridha.balance_claims = off;
-- every idle service in one statement (the counts are written once, at
-- commit)
INSERT INTO gridha.batches (service_id, batch_id, payload)
SELECT 'idle-' || lpad(i::text, 6, '0'), 'idle-' || lpad(i::text, 6, '0') || '-1', '\x00'
  FROM generate_series(1, $IDLE) AS i;
SELECT count(*) FROM gridha.acquire_claims('00000000-0000-4000-9000-000000000042');
DO \$\$
DECLARE
    inst uuid := '00000000-0000-4000-9000-000000000042';
    got int;
    s text[];
    b text[];
    e bigint[];
BEGIN
    LOOP
        SELECT count(*), array_agg(service_id), array_agg(batch_id), array_agg(epoch)
          INTO got, s, b, e FROM gridha.next_batches(inst, 10000);
        EXIT WHEN got = 0;
        PERFORM count(*) FROM gridha.report_statuses(inst, s, b, e,
                                                      array_fill('committed'::text, ARRAY[got]));
    END LOOP;
END
\$\$;
SELECT gridha.release_claims('00000000-0000-4000-9000-000000000042');
EOF
sql_is "$IDLE|$IDLE" "SELECT count(*), count(*) FILTER (WHERE status = 'committed') FROM gridha.batches"
check $? "setup: $IDLE idle services, each with one batch committed through the API ($(($(date +%s) - t0)) s)"

RESTARTED=1
# shellcheck disable=SC2086 # the options are words
if ! gridha_cluster_restart $SUITE_CLUSTER_OPTS $WORKER_OPTS; then
	not_ok "setup: the cluster restarted with gridha.workers = 3"
	exit 1
fi

# the producer's services exist before the workers settle their shares
psql_db -c "INSERT INTO gridha.batches (service_id, batch_id, payload)
            SELECT 'act-' || lpad(i::text, 3, '0'), 'act-' || lpad(i::text, 3, '0') || '-000000', '\\x01'
              FROM generate_series(1, $ACTIVE) AS i ORDER BY i;
            INSERT INTO soak_enqueued (service_id, batch_id)
            SELECT 'act-' || lpad(i::text, 3, '0'), 'act-' || lpad(i::text, 3, '0') || '-000000'
              FROM generate_series(1, $ACTIVE) AS i ORDER BY i" >/dev/null
TOTAL=$((IDLE + ACTIVE))
# idle claims stay where the workers first took them (the count share bounds
# only what each takes while they are free): how evenly depends on the
# order in which the workers came up, and is printed, not checked
all_held() {
	sql_is "3|$TOTAL" "SELECT count(*), sum(held) FROM gridha.instances
	                   WHERE kind = 'worker' AND soft_expiry > now()"
}
t0=$(date +%s)
wait_until 120 all_held
check $? "setup: the 3 workers hold all $TOTAL services ($(($(date +%s) - t0)) s)"
psql_db -c "SELECT label, held FROM gridha.instances WHERE kind = 'worker' ORDER BY label" | diag
psql_db -c "INSERT INTO soak_epochs SELECT service_id, epoch FROM gridha.service_claims
            WHERE service_id LIKE 'idle-%'"

# ---------------------------------------------------------------------------
# the run: a producer, a sampler of leases and one of sizes

producer() {
	local r=1 end=$(($(date +%s) + DURATION))
	while [ "$(date +%s)" -lt "$end" ]; do
		psql_db -c "BEGIN;
		  INSERT INTO gridha.batches (service_id, batch_id, payload)
		  SELECT 'act-' || lpad(i::text, 3, '0'), 'act-' || lpad(i::text, 3, '0') || '-' || lpad('$r', 6, '0'), '\\x01'
		    FROM generate_series(1, $ACTIVE) AS i ORDER BY i;
		  INSERT INTO soak_enqueued (service_id, batch_id)
		  SELECT 'act-' || lpad(i::text, 3, '0'), 'act-' || lpad(i::text, 3, '0') || '-' || lpad('$r', 6, '0')
		    FROM generate_series(1, $ACTIVE) AS i ORDER BY i;
		  COMMIT" >/dev/null || echo "# producer: round $r failed" >&2
		r=$((r + 1))
		sleep "$(awk "BEGIN { print $ROUND_MS / 1000 }")"
	done
}

# the age of each worker's last renewal: its soft expiry minus 10 s
lease_ages() {
	local end=$(($(date +%s) + DURATION))
	while [ "$(date +%s)" -lt "$end" ]; do
		psql_db -c "SELECT round(extract(epoch FROM max(now() - (soft_expiry - interval '10 s')))::numeric, 2),
		                   count(*)
		              FROM gridha.instances WHERE kind = 'worker' AND soft_expiry IS NOT NULL" \
			>>"$WORK/lease_ages" 2>/dev/null
		sleep 1
	done
}

SIZES_SQL="SELECT (extract(epoch FROM now())::bigint - $(date +%s)) || '|' ||
       string_agg(pg_table_size(c) || '|' || pg_indexes_size(c), '|' ORDER BY c::text)
  FROM unnest(ARRAY['gridha.batches', 'gridha.instances', 'gridha.service_claims']::regclass[]) AS c"
sizes() {
	local end=$(($(date +%s) + DURATION))
	while [ "$(date +%s)" -lt "$end" ]; do
		psql_db -c "$SIZES_SQL" >>"$WORK/sizes" 2>/dev/null
		sleep 10
	done
	psql_db -c "$SIZES_SQL" >>"$WORK/sizes" 2>/dev/null
}

producer &
PIDS+=("$!")
PRODUCER=$!
lease_ages &
PIDS+=("$!")
sizes &
SIZER=$!
PIDS+=("$!")
wait "$PRODUCER"
wait "$SIZER"

# ---------------------------------------------------------------------------
# renew

max_age=$(cut -d'|' -f1 "$WORK/lease_ages" | sort -g | tail -1)
samples=$(wc -l <"$WORK/lease_ages")
awk -F'|' -v lim=$((2 * RENEW_S)) '$1 > lim || $2 != 3 { bad = 1 } END { exit bad }' "$WORK/lease_ages" &&
	[ "$samples" -ge $((DURATION / 2)) ]
check $? "renew: in $samples samples, every worker's lease was renewed at most $((2 * RENEW_S)) s ago (renew interval ${RENEW_S} s; the oldest seen: ${max_age} s)"

# ---------------------------------------------------------------------------
# sizes

{
	echo "sizes (kB, table / indexes) every 10 s:"
	printf '%6s %20s %20s %20s\n' "s" "batches" "instances" "service_claims"
	awk -F'|' '{ printf "%6s %9d / %8d %9d / %8d %9d / %8d\n", $1, $2/1024, $3/1024, $4/1024, $5/1024, $6/1024, $7/1024 }' "$WORK/sizes"
} | diag
n=$(wc -l <"$WORK/sizes")
mid=$(sed -n "$(((n + 1) / 2))p" "$WORK/sizes")
last=$(tail -1 "$WORK/sizes")
level=$(awk -F'|' -v m="$mid" -v l="$last" 'BEGIN {
	split(m, a, "|"); split(l, b, "|"); ok = 1; worst = ""
	for (i = 2; i <= 7; i++) if (b[i] > a[i] * 1.2 + 1048576) { ok = 0; worst = worst " column " i }
	print ok worst }')
[ "$n" -ge 3 ] && [ "${level%% *}" = 1 ]
check $? "sizes: from the middle of the run to its end no table or index of batches, instances or service_claims grew by more than a fifth plus 1 MB${level#1}"

# ---------------------------------------------------------------------------
# drain

open_batches() {
	sql_is 0 "SELECT count(*) FROM gridha.batches WHERE service_id LIKE 'act-%' AND status <> 'committed'"
}
t0=$(date +%s)
wait_until 120 open_batches
check $? "drain: every batch the producer enqueued is committed or pruned ($(($(date +%s) - t0)) s after it stopped)"
psql_db -c "SELECT status, count(*) FROM gridha.batches GROUP BY 1 ORDER BY 1" | diag

psql_db -F $'\t' -c "SELECT service_id, batch_id FROM soak_enqueued ORDER BY service_id, pos" \
	>"$WORK/expected.tsv"
if python3 "$CHECK_LOG" --expected "$WORK/expected.tsv" --require-all --one-in-flight \
		"$WORK/ledger.log" >"$WORK/check.out" 2>&1; then
	ok "drain: all $(wc -l <"$WORK/expected.tsv") batches reached the ledger in their service's order, one in flight per service"
else
	not_ok "drain: all batches reached the ledger in their service's order, one in flight per service"
	grep -A 10 '^violations' "$WORK/check.out" | diag
fi

sql_is 0 "SELECT count(*) FROM soak_epochs s JOIN gridha.service_claims c USING (service_id)
          WHERE c.epoch <> s.epoch"
check $? "drain: no idle service changed hands during the run (epochs as they were)"

exit "$FAILED"
