#!/usr/bin/env bash
# test/suites/17_pitr.sh: a physical backup (pg_basebackup) and a
# point-in-time recovery never give an epoch again that the lost history
# gave.
#
# A cluster of its own, archiving its WAL: instance A claims 5 services
# (epoch 1), a base backup is taken, a restore point is named, and then, on
# the history the recovery will lose, A's lease runs out and B takes every
# service at epoch 2 and hands a batch out under it. The backup is recovered
# to the restore point and promoted (a new timeline). There the claims are
# A's at epoch 1 again, expired; B's write from the lost history (epoch 2)
# is refused; and the next takeover gives epochs above every epoch any
# earlier timeline can have given (gridha starts each timeline's epochs at
# (timeline - 1) << 40), so no epoch of the lost history is ever given
# again, and A's own late write under epoch 1 is refused too.
#
# Leaves the run's cluster alone: its own two data directories and ports
# live in the suite's scratch directory and are removed at the end.
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
LIB=${GRIDHA_LIB:-$REPO/test/lib.sh}
FAILED=0

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$LIB"
# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"
plan 12

DIR=$(mktemp -d /tmp/gridha-pitr.XXXXXX)
chmod 755 "$DIR"
[ "$(id -u)" -eq 0 ] && chown postgres: "$DIR"
gridha_as_pg mkdir -p "$DIR/archive"
P1=$(gridha_free_port $((PGPORT + 100)))
P2=$(gridha_free_port $((P1 + 1)))

cleanup() {
	gridha_as_pg "$PG_BINDIR/pg_ctl" -D "$DIR/primary" -m immediate stop >/dev/null 2>&1
	gridha_as_pg "$PG_BINDIR/pg_ctl" -D "$DIR/recovered" -m immediate stop >/dev/null 2>&1
	[ -n "${GRIDHA_KEEP_TMP:-}" ] || rm -rf "$DIR"
}
trap cleanup EXIT

# on PORT SQL...: one psql session against the cluster on PORT.
on() {
	local port=$1
	shift
	psql -X -q -A -t -v ON_ERROR_STOP=1 -h "$DIR" -p "$port" -U postgres -d postgres "$@"
}

# sqlstate_on PORT SQL: the SQLSTATE the statement raises, or "ok".
sqlstate_on() {
	on "$1" <<EOF
DO \$\$
BEGIN
    EXECUTE \$q\$$2\$q\$;
    RAISE NOTICE 'ok';
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE '%', SQLSTATE;
END
\$\$;
EOF
}

# Each cluster's server log: in GRIDHA_LOG_DIR under test/run.sh (its
# crash scan reads it after this directory is gone), else in DIR.
declare -A LOGS
LOGS[primary]=$(gridha_server_log pitr-primary "$DIR/primary.log")
LOGS[recovered]=$(gridha_server_log pitr-recovered "$DIR/recovered.log")

start_cluster() {
	gridha_as_pg "$PG_BINDIR/pg_ctl" -D "$1" -l "${LOGS[$(basename "$1")]}" -w -t 60 start >/dev/null
}

# --- the primary, archiving ------------------------------------------------
if ! gridha_as_pg "$PG_BINDIR/initdb" --auth=trust -U postgres --encoding=UTF8 --locale=C.UTF-8 \
		--no-sync -D "$DIR/primary" >"$DIR/initdb.log" 2>&1; then
	not_ok "initdb of the archiving cluster"
	cat "$DIR/initdb.log" | diag
	exit 1
fi
cat >>"$DIR/primary/postgresql.conf" <<EOF
port = $P1
listen_addresses = ''
unix_socket_directories = '$DIR'
wal_level = replica
archive_mode = on
archive_command = 'cp %p $DIR/archive/%f.part && mv $DIR/archive/%f.part $DIR/archive/%f'
EOF
start_cluster "$DIR/primary" || { not_ok "the archiving cluster starts"; exit 1; }

on "$P1" >/dev/null <<'EOF' || { not_ok "setup on the primary"; exit 1; }
CREATE EXTENSION gridha;
SET gridha.balance_claims = off;
SELECT gridha.enqueue('p' || s, 'p' || s || '-b' || b, '\x00')
  FROM generate_series(1, 5) s, generate_series(1, 3) b;
CREATE TABLE ids AS SELECT 'aaaaaaaa-0000-0000-0000-00000000000a'::uuid AS a,
                           'bbbbbbbb-0000-0000-0000-00000000000b'::uuid AS b;
SELECT count(*) FROM gridha.acquire_claims('aaaaaaaa-0000-0000-0000-00000000000a');
EOF
[ "$(on "$P1" -c "SELECT count(*) || '/' || max(epoch) FROM gridha.service_claims
                   WHERE claimant = 'aaaaaaaa-0000-0000-0000-00000000000a'")" = 5/1 ]
check $? "primary: A holds the 5 services at epoch 1"

if gridha_as_pg "$PG_BINDIR/pg_basebackup" -h "$DIR" -p "$P1" -U postgres -D "$DIR/recovered" \
		-X stream --no-sync >"$DIR/basebackup.log" 2>&1; then
	ok "pg_basebackup of the primary"
else
	not_ok "pg_basebackup of the primary"
	diag <"$DIR/basebackup.log"
	exit 1
fi

# After the backup: a batch committed under epoch 1, then the restore point.
on "$P1" >/dev/null <<'EOF' || { not_ok "work before the restore point"; exit 1; }
SET gridha.balance_claims = off;
SELECT gridha.next_batch('aaaaaaaa-0000-0000-0000-00000000000a');
SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', service_id, batch_id, epoch, 'committed')
  FROM gridha.batches WHERE status = 'submitting';
SELECT pg_create_restore_point('gridha_before_takeover');
EOF

# The history the recovery loses: A's lease runs out, B takes over at
# epoch 2 and hands a batch out under it.
on "$P1" >/dev/null <<'EOF' || { not_ok "the takeover on the lost history"; exit 1; }
SET gridha.balance_claims = off;
UPDATE gridha.instances SET soft_expiry = now() - interval '1 hour', hard_expiry = now() - interval '1 minute'
 WHERE instance_id = 'aaaaaaaa-0000-0000-0000-00000000000a';
SELECT count(*) FROM gridha.acquire_claims('bbbbbbbb-0000-0000-0000-00000000000b');
SELECT gridha.next_batch('bbbbbbbb-0000-0000-0000-00000000000b');
EOF
LOST=$(on "$P1" -c "SELECT service_id || ' ' || batch_id || ' ' || epoch FROM gridha.batches
                    WHERE status = 'submitting' AND instance_id = 'bbbbbbbb-0000-0000-0000-00000000000b'")
LOST_MAX=$(on "$P1" -c "SELECT max(epoch) FROM gridha.service_claims")
[ "$LOST_MAX" = 2 ] && [ -n "$LOST" ]
check $? "lost history: B took every service at epoch 2 and handed out a batch ($LOST)"

# Everything archived, then the primary is gone. A segment appears in the
# archive whole or not at all (the archive command copies it under another
# name and renames it): with a plain cp, a file seen while the copy was under
# way was cut short by the immediate stop, and recovery refused it ("has
# wrong size"; found by test/repeat.sh, 1 run in 7).
SEG=$(on "$P1" -c "SELECT pg_walfile_name(pg_switch_wal())")
archived() {
	[ -f "$DIR/archive/$SEG" ]
}
wait_until 60 archived
check $? "the WAL holding the lost history is archived ($SEG)"
gridha_as_pg "$PG_BINDIR/pg_ctl" -D "$DIR/primary" -m immediate stop >/dev/null 2>&1

# --- point-in-time recovery to the restore point ----------------------------
cat >>"$DIR/recovered/postgresql.conf" <<EOF
port = $P2
restore_command = 'cp $DIR/archive/%f %p'
recovery_target_name = 'gridha_before_takeover'
recovery_target_action = 'promote'
archive_mode = off
EOF
gridha_as_pg touch "$DIR/recovered/recovery.signal"
start_cluster "$DIR/recovered" || { not_ok "the recovered cluster starts"; diag <"${LOGS[recovered]}"; exit 1; }
promoted() {
	[ "$(on "$P2" -c "SELECT pg_is_in_recovery()" 2>/dev/null)" = f ]
}
wait_until 60 promoted
check $? "recovery reached the restore point and promoted"
TLI=$(on "$P2" -c "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int")
[ "$TLI" -ge 2 ]
check $? "the recovered cluster writes a new timeline ($TLI)"

[ "$(on "$P2" -c "SELECT count(*) || '/' || max(epoch) FROM gridha.service_claims
                   WHERE claimant = 'aaaaaaaa-0000-0000-0000-00000000000a'")" = 5/1 ] &&
	[ "$(on "$P2" -c "SELECT status FROM gridha.batches WHERE service_id = 'p1' AND batch_id = 'p1-b1'")" = committed ]
check $? "recovered: the claims are A's at epoch 1 and the batch committed before the restore point is committed"

[ "$(on "$P2" -c "SELECT count(*) FROM gridha.batches")" = 15 ]
check $? "recovered: all 15 batches are there"

read -r LOST_SVC LOST_BATCH LOST_EPOCH <<<"$LOST"
[ "$(sqlstate_on "$P2" "SELECT gridha.report_submission('bbbbbbbb-0000-0000-0000-00000000000b', '$LOST_SVC', '$LOST_BATCH', $LOST_EPOCH, 'accepted')" 2>&1 |
	grep -o 'NOTICE:.*' | awk '{print $2}')" = RG001 ]
check $? "B's write under epoch 2 from the lost history is refused (RG001)"

# A takeover on the new timeline: epochs start above every earlier timeline's.
# (C's claims are judged by its lease alone: its session ends with psql.)
on "$P2" >/dev/null <<'EOF' || { not_ok "the takeover on the new timeline"; exit 1; }
SET gridha.balance_claims = off;
SET gridha.session_liveness = off;
UPDATE gridha.instances SET soft_expiry = now() - interval '1 hour', hard_expiry = now() - interval '1 minute'
 WHERE instance_id = 'aaaaaaaa-0000-0000-0000-00000000000a';
SELECT count(*) FROM gridha.acquire_claims('cccccccc-0000-0000-0000-00000000000c');
EOF
BASE=$(( (TLI - 1) << 40 ))
[ "$(on "$P2" -c "SELECT count(*) FROM gridha.service_claims
                   WHERE claimant = 'cccccccc-0000-0000-0000-00000000000c' AND epoch >= $BASE")" = 5 ]
check $? "a takeover on timeline $TLI gives epochs from $BASE on, above every epoch an earlier timeline can give (the lost history's reached $LOST_MAX)"

[ "$(sqlstate_on "$P2" "SELECT gridha.next_batch('bbbbbbbb-0000-0000-0000-00000000000b')" 2>&1 |
	grep -o 'NOTICE:.*' | awk '{print $2}')" = ok ] &&
	[ "$(on "$P2" -c "SELECT count(*) FROM gridha.service_claims
	                   WHERE claimant = 'bbbbbbbb-0000-0000-0000-00000000000b' AND epoch < $BASE")" = 0 ]
check $? "B, coming back, holds none of its claims of the lost history: whatever it holds (its work share) it took on timeline $TLI, at an epoch from $BASE on"

[ "$(sqlstate_on "$P2" "SELECT gridha.report_status('aaaaaaaa-0000-0000-0000-00000000000a', 'p2', 'p2-b1', 1, 'committed')" 2>&1 |
	grep -o 'NOTICE:.*' | awk '{print $2}')" = RG001 ]
check $? "A's late write under epoch 1 is refused after the takeover (RG001)"

[ "$FAILED" -eq 0 ]
