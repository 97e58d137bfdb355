#!/usr/bin/env bash
# test/suites/40_idseq_soak.sh: ID windows under concurrency.
#
# 8 pgbench clients reserve blocks (gridha.reserve_ids, 1..40 ids) and take
# single ids (gridha.next_id, blocks of 7 cached per backend, some of them
# in transactions that roll back) from one sequence with small windows,
# while two would-be leaders run maintenance (the window agent) every
# 100 ms. Every id and block that committed is logged; then the checks:
# no id appears twice, no block crosses a window's end, every tick of the
# agents ran once; and after one more tick the agent has left
# min_open_windows windows with room for a block, and none without.
#
# Output: TAP lines. Run alone it makes its own throwaway cluster (the
# extension must be installed). Knobs: IDSOAK_SECONDS (10), IDSOAK_CLIENTS (8),
# IDSOAK_WINDOW (40: a window opens every few reservations, the path where
# PostgreSQL 17 once refused next_id; see idseq_orphans_stmt in src/idseq.c).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "${GRIDHA_LIB:-$HERE/../lib.sh}"

SECONDS_RUN=${IDSOAK_SECONDS:-10}
CLIENTS=${IDSOAK_CLIENTS:-8}
WINDOW=${IDSOAK_WINDOW:-40}
DB=gridha_idseq_soak

FAILED=0
# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$HERE/../tap.sh"
plan 9
suite_work idseq_soak

gridha_psql -d postgres -c "SET client_min_messages = warning" \
	-c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
gridha_psql -d postgres \
	-c "ALTER DATABASE $DB SET gridha.id_block_size = 7" \
	-c "ALTER DATABASE $DB SET gridha.maintenance_interval = '100ms'"
gridha_psql -d "$DB" <<SQL
CREATE EXTENSION gridha;
SELECT gridha.create_id_sequence('soak', $WINDOW, 4);
-- every id (as [id, id + 1)) and every block that committed
CREATE TABLE got (kind text NOT NULL, lo bigint NOT NULL, hi bigint NOT NULL);
SQL

cat >"$WORK/ids.sql" <<'EOF2'
\set n random(1, 40)
INSERT INTO got SELECT 'block', lower(r), upper(r) FROM gridha.reserve_ids('soak', :n) AS r;
INSERT INTO got SELECT 'id', i, i + 1 FROM gridha.next_id('soak') AS i;
INSERT INTO got SELECT 'id', i, i + 1 FROM (SELECT gridha.next_id('soak') AS i FROM generate_series(1, 3)) AS x;
BEGIN;
INSERT INTO got SELECT 'id', i, i + 1 FROM (SELECT gridha.next_id('soak') AS i FROM generate_series(1, 10)) AS x;
ROLLBACK;
INSERT INTO got SELECT 'id', i, i + 1 FROM gridha.next_id('soak') AS i;
EOF2
cat >"$WORK/agent.sql" <<'EOF2'
SELECT * FROM gridha.run_maintenance(md5('idsoak-agent-' || :client_id::text)::uuid);
\sleep 20 ms
EOF2

gridha_log "idseq soak: $CLIENTS clients for ${SECONDS_RUN}s, windows of $WINDOW"
rc_ids=0
rc_agent=0
pgbench -n -M prepared -c 2 -j 1 -T "$SECONDS_RUN" -f "$WORK/agent.sql" "$DB" >"$WORK/agent.log" 2>&1 &
agent_pid=$!
pgbench -n -M prepared -c "$CLIENTS" -j 2 -T "$SECONDS_RUN" -f "$WORK/ids.sql" "$DB" >"$WORK/ids.log" 2>&1 || rc_ids=$?
wait "$agent_pid" || rc_agent=$?

if [ "$rc_ids" -eq 0 ] && [ "$rc_agent" -eq 0 ] && ! grep -qi 'aborted\|error' "$WORK/ids.log" "$WORK/agent.log"; then
	echo "ok - pgbench clients and agents ran without errors"
else
	echo "not ok - pgbench clients and agents ran without errors"
	grep -i 'error\|abort' "$WORK/ids.log" "$WORK/agent.log" | head -20 | sed 's/^/# /'
	FAILED=1
fi
gridha_log "idseq soak: $(gridha_psql -d "$DB" -c "SELECT count(*) FILTER (WHERE kind = 'id') || ' ids, ' || count(*) FILTER (WHERE kind = 'block') || ' blocks' FROM got")"

check_sql "$DB" "ids were served by next_id and blocks by reserve_ids" \
	"SELECT count(*) FILTER (WHERE kind = 'id') > 100 AND count(*) FILTER (WHERE kind = 'block') > 100 FROM got"
check_sql "$DB" "no id appears twice (ids and blocks never overlap)" \
	"SELECT count(*) = 0 FROM (SELECT lo, lag(hi) OVER (ORDER BY lo, hi) AS prev_hi FROM got) x WHERE lo < prev_hi"
check_sql "$DB" "no block crosses the end of its window" \
	"SELECT bool_and((lo - 1) / $WINDOW = (hi - 2) / $WINDOW AND hi > lo) FROM got WHERE kind = 'block'"
check_sql "$DB" "every id lies below the sequence's high water" \
	"SELECT max(hi) - 1 <= (SELECT high_water FROM gridha.id_sequences WHERE name = 'soak') FROM got"
check_sql "$DB" "the two would-be leaders ran ticks, each once" \
	"SELECT count(*) > 1 AND count(DISTINCT tick) = count(*) FROM gridha.maintenance_ticks"

# One more tick, at once: the stored ticks are removed and the lease handed
# over, as if the clock had moved on.
gridha_psql -d "$DB" -o /dev/null \
	-c "SELECT gridha.resign_lead(leader, duty) FROM gridha.leases WHERE leader IS NOT NULL" \
	-c "DELETE FROM gridha.maintenance_ticks"
check_sql "$DB" "a tick of the window agent runs after the load" \
	"SELECT outcome = 'ran' FROM gridha.run_maintenance('00000000-0000-0000-0000-00000000aaaa')"
check_sql "$DB" "after it, min_open_windows (4) windows have room for a block" \
	"SELECT count(*) >= 4 FROM gridha.id_windows WHERE name = 'soak' AND window_end - next_id >= 7"
check_sql "$DB" "after it, no window without room for a block is left" \
	"SELECT count(*) = 0 FROM gridha.id_windows WHERE name = 'soak' AND window_end - next_id < 7"

[ "${IDSOAK_KEEP:-0}" = 1 ] || gridha_psql -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB" >/dev/null
[ "$FAILED" -eq 0 ]
