#!/usr/bin/env bash
# demo/run.sh: `make demo`, a minute of gridha at work.
#
# From a fresh Debian 12 machine, as root: installs what is missing, builds
# and installs gridha, starts a throwaway cluster with gridha preloaded and
# three background-worker instances, starts the test ledger
# (test/dlt/ledger.py) and points the default target at it, starts one
# external instance beside the workers (the reference client,
# client/gridha-client, which speaks the 1.2 SQL API: typed outcomes and
# ledger statuses, batched reports of gridha.status_report rows), enqueues
# DEMO_SERVICES x DEMO_BATCHES batches and shows the progress about once a
# second. Half-way it stops one worker with gridha.stop_worker; the others
# take over its services. It ends with a summary (with each instance's
# gridha.instance_health), and exits 0 only when no batch was lost and the
# ledger saw each service's batches in enqueue order, one at a time.
#
# Words:
#   victim     the worker stopped half-way ("worker 2")
#   client     the external instance, labelled "client 1"
#   takeover   from the stop to the first hand-out of one of the victim's
#              services by another instance (gridha.batches.handed_out_at
#              and instance_id)
#   re-claim   another instance taking one of the victim's former claims;
#              a trigger on gridha.service_claims logs every change of
#              claimant with the server clock into demo.claim_log
#   terminal   committed or invalid
#   lost       enqueued but not terminal at the end
#
# All times come from the server clock. The run after the build is bounded
# by GRIDHA_DEMO_TIMEOUT seconds (default 90): past it the demo prints what
# is left and exits non-zero. The ledger, the cluster and the scratch
# directory are removed on any exit (GRIDHA_KEEP_TMP=1 keeps the directory).
#
# Environment: PG_CONFIG (the PostgreSQL to use, default
# /usr/lib/postgresql/15/bin/pg_config), GRIDHA_BASE_PORT (first port tried
# for the cluster), GRIDHA_DEMO_TIMEOUT, DEMO_SERVICES (default 40),
# DEMO_BATCHES (per service, default 12), DEMO_COMMIT_DELAY (the ledger's,
# default 2 s).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
# shellcheck source-path=SCRIPTDIR source=../test/lib.sh
. "$REPO/test/lib.sh"

DB=gridha_demo
WORKERS=3
VICTIM_LABEL="worker 2"
SERVICES=${DEMO_SERVICES:-40}
BATCHES=${DEMO_BATCHES:-12}
COMMIT_DELAY=${DEMO_COMMIT_DELAY:-2}
TIMEOUT=${GRIDHA_DEMO_TIMEOUT:-90}
TOTAL=$((SERVICES * BATCHES))
# batches/s is measured over this many progress lines (about seconds)
RATE_WINDOW=3

# Claim timings short enough for a takeover within seconds, and the worker
# settings; all go into the cluster's configuration.
SETTINGS=(
	shared_preload_libraries=gridha
	max_worker_processes=16
	"gridha.workers=$WORKERS"
	"gridha.database=$DB"
	gridha.soft_expiry=5s
	gridha.hard_expiry=15s
	gridha.renew_interval=1s
	gridha.naptime=500ms
	gridha.monitor_interval=250ms
	gridha.submit_timeout=5s
)

LEDGER_PID=
CLIENT_PID=
CLIENT_LABEL="client 1"

say() {
	printf '%s\n' "$*"
}

section() {
	printf '\n== %s ==\n' "$*"
}

die() {
	printf 'demo: %s\n' "$*" >&2
	exit 1
}

# demo_psql [ARG...]: psql on the demo database; no statement runs forever.
demo_psql() {
	PGOPTIONS="-c statement_timeout=20s" gridha_psql -d "$DB" "$@"
}

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	local rc=$?
	if [ -n "$CLIENT_PID" ]; then
		kill -TERM "$CLIENT_PID" 2>/dev/null || true
		wait "$CLIENT_PID" 2>/dev/null || true
		CLIENT_PID=
	fi
	if [ -n "$LEDGER_PID" ]; then
		kill -TERM "$LEDGER_PID" 2>/dev/null || true
		wait "$LEDGER_PID" 2>/dev/null || true
		LEDGER_PID=
	fi
	gridha_cluster_cleanup >/dev/null 2>&1 || true
	exit "$rc"
}

# ---------------------------------------------------------------------------
# Steps before the clock starts

install_prerequisites() {
	local missing
	missing=$(gridha_missing_packages | tr '\n' ' ')
	missing=${missing% }
	[ -z "$missing" ] && return 0
	# as root on Debian, the project's one installing script (as make test)
	if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
		section "installing $missing (test/install-debian.sh)"
		bash "$REPO/test/install-debian.sh" || die "test/install-debian.sh failed"
		return 0
	fi
	# shellcheck disable=SC2086 # one word per package
	die "$(gridha_missing_note $missing)"
}

build() {
	section build
	local log
	log=$(mktemp /tmp/gridha-demo-build.XXXXXX)
	if ! make -j"$(nproc)" PG_CONFIG="$PG_CONFIG" >"$log" 2>&1 ||
		! make install PG_CONFIG="$PG_CONFIG" >>"$log" 2>&1; then
		grep -E -A3 '(error|warning):|\*\*\*' "$log" | head -n 60 || tail -n 40 "$log"
		rm -f "$log"
		die "the build failed"
	fi
	rm -f "$log"
	say "built and installed gridha"
}

# start_ledger: the test ledger on a port the OS picks, logging every POST.
start_ledger() {
	python3 "$REPO/test/dlt/ledger.py" --port 0 --port-file "$GRIDHA_TEST_DIR/ledger.port" \
		--log "$GRIDHA_TEST_DIR/ledger.log" --commit-delay "$COMMIT_DELAY" \
		--max-lifetime $((TIMEOUT + 120)) >"$GRIDHA_TEST_DIR/ledger.out" 2>&1 &
	LEDGER_PID=$!
	local _try
	for _try in $(seq 1 100); do
		[ -s "$GRIDHA_TEST_DIR/ledger.port" ] && break
		kill -0 "$LEDGER_PID" 2>/dev/null || break
		sleep 0.1
	done
	[ -s "$GRIDHA_TEST_DIR/ledger.port" ] || {
		cat "$GRIDHA_TEST_DIR/ledger.out" >&2
		die "the test ledger did not start"
	}
	LEDGER=http://127.0.0.1:$(cat "$GRIDHA_TEST_DIR/ledger.port")
}

start_cluster() {
	section "cluster, ledger, workers"
	gridha_cluster_init || die "initdb failed"
	start_ledger
	gridha_cluster_start "${SETTINGS[@]}" || die "the server did not start"
	say "PostgreSQL $(gridha_psql -d postgres -c 'SHOW server_version') on 127.0.0.1:$PGPORT (socket in $PGHOST), gridha preloaded"
	say "test ledger on $LEDGER, commit delay ${COMMIT_DELAY}s"
	say "settings: ${SETTINGS[*]:2:2}"
	say "          ${SETTINGS[*]:4:3}"
	say "          ${SETTINGS[*]:7}"
}

# setup_database: the extension, the default target pointing at the ledger,
# and the demo's own schema: its clock and the claim log.
setup_database() {
	gridha_psql -d postgres -c "CREATE DATABASE $DB" || die "CREATE DATABASE failed"
	demo_psql >/dev/null <<EOF || die "could not set up $DB"
SET client_min_messages = warning;
CREATE EXTENSION gridha;

UPDATE gridha.targets
   SET submit_url = '$LEDGER/batches/{service_id}/{batch_id}',
       status_url = '$LEDGER/batch_statuses?id={batch_ids}'
 WHERE target = 'default';

CREATE SCHEMA demo;

CREATE TABLE demo.run (started_at timestamptz NOT NULL);

-- The stopped worker, when it was asked to stop, and what it held then.
CREATE TABLE demo.victim (instance_id uuid NOT NULL, label text NOT NULL,
                          stopped_at timestamptz NOT NULL);
CREATE TABLE demo.victim_services (service_id text PRIMARY KEY);

-- Every change of claimant, with the server clock.
CREATE TABLE demo.claim_log (
    service_id   text NOT NULL,
    old_claimant uuid,
    new_claimant uuid,
    epoch        bigint NOT NULL,
    at           timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE FUNCTION demo.log_claim() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, demo
AS \$\$
BEGIN
    INSERT INTO demo.claim_log (service_id, old_claimant, new_claimant, epoch)
    VALUES (NEW.service_id, OLD.claimant, NEW.claimant, NEW.epoch);
    RETURN NULL;
END
\$\$;

CREATE TRIGGER demo_claim_log
AFTER UPDATE OF claimant ON gridha.service_claims
FOR EACH ROW WHEN (OLD.claimant IS DISTINCT FROM NEW.claimant)
EXECUTE FUNCTION demo.log_claim();
EOF
}

# wait_workers: until every static worker has registered its instance.
wait_workers() {
	local n=0 _try
	for _try in $(seq 1 100); do
		n=$(demo_psql -c "SELECT count(*) FROM gridha.workers
		                   WHERE state NOT IN ('starting', 'waiting for database')")
		[ "$n" -ge "$WORKERS" ] && break
		sleep 0.2
	done
	[ "$n" -ge "$WORKERS" ] || die "only $n of $WORKERS workers came up; see $GRIDHA_PGLOG"
	demo_psql -F ' ' -c "SELECT '  ' || label, 'instance ' || instance_id, 'pid ' || pid
	                     FROM gridha.workers ORDER BY label"
}

# start_client: the reference client as one more instance, on the PG*
# environment of the cluster; it stops (releasing its claims) at the end.
start_client() {
	"$REPO/client/gridha-client" --dsn "dbname=$DB" --label "$CLIENT_LABEL" \
		--idle-sleep-ms 100 --monitor-interval-ms 250 --submit-timeout-ms 5000 \
		--max-runtime-s $((TIMEOUT + 60)) --log "$GRIDHA_TEST_DIR/client.log" \
		2>"$GRIDHA_TEST_DIR/client.err" &
	CLIENT_PID=$!
	local n=0 _try
	for _try in $(seq 1 50); do
		n=$(demo_psql -c "SELECT count(*) FROM gridha.instances WHERE label = '$CLIENT_LABEL'")
		[ "$n" -ge 1 ] && break
		sleep 0.2
	done
	[ "$n" -ge 1 ] || die "the reference client did not register; see $GRIDHA_TEST_DIR/client.err"
	demo_psql -F ' ' -c "SELECT '  ' || label, 'instance ' || instance_id, 'external (client/gridha-client, SQL API 1.2)'
	                     FROM gridha.instances WHERE label = '$CLIENT_LABEL'"
}

# enqueue: every service's batches, round by round, in one transaction; the
# expected order at the ledger is each service's seq order.
enqueue() {
	demo_psql >/dev/null <<EOF || die "enqueue failed"
INSERT INTO demo.run VALUES (clock_timestamp());
SELECT gridha.enqueue(format('svc-%s', lpad(s::text, 2, '0')),
                      format('svc-%s-b%s', lpad(s::text, 2, '0'), lpad(b::text, 3, '0')),
                      convert_to(format('{"service":%s,"batch":%s}', s, b), 'UTF8'))
  FROM generate_series(1, $BATCHES) b, generate_series(1, $SERVICES) s
 ORDER BY b, s;
EOF
	demo_psql -F $'\t' -c "SELECT service_id, batch_id FROM gridha.batches ORDER BY service_id, seq" \
		>"$GRIDHA_TEST_DIR/expected.tsv"
	say "enqueued $TOTAL batches: $SERVICES services (svc-01 ..) x $BATCHES batches"
}

# ---------------------------------------------------------------------------
# The run

# progress: one line of state, '|'-separated: elapsed seconds, committed,
# terminal, the claims per instance label (the workers and the client).
progress() {
	demo_psql -F '|' <<'EOF'
SELECT round(extract(epoch FROM clock_timestamp() - r.started_at)::numeric, 1),
       (SELECT count(*) FROM gridha.batches WHERE status = 'committed'),
       (SELECT count(*) FROM gridha.batches WHERE status IN ('committed', 'invalid')),
       (SELECT string_agg(format('%s=%s%s', i.label,
                                 (SELECT count(*) FROM gridha.service_claims c
                                   WHERE c.claimant = i.instance_id),
                                 CASE WHEN i.kind = 'worker' AND w.instance_id IS NULL
                                      THEN ' (stopped)' ELSE '' END),
                          ' ' ORDER BY i.kind DESC, i.label)
          FROM gridha.instances i
          LEFT JOIN gridha.workers w USING (instance_id)
         WHERE i.kind IN ('worker', 'external'))
       || coalesce((SELECT ' free=' || count(*) FROM gridha.service_claims
                     WHERE claimant IS NULL HAVING count(*) > 0), '')
  FROM demo.run r;
EOF
}

# stop_victim: note what the victim holds and stop it, in one transaction.
stop_victim() {
	demo_psql -F '|' <<EOF
BEGIN;
INSERT INTO demo.victim
SELECT instance_id, label, clock_timestamp() FROM gridha.workers WHERE label = '$VICTIM_LABEL';
INSERT INTO demo.victim_services
SELECT c.service_id FROM gridha.service_claims c JOIN demo.victim v ON c.claimant = v.instance_id;
SELECT v.label, v.instance_id, (SELECT count(*) FROM demo.victim_services),
       gridha.stop_worker(v.instance_id)
  FROM demo.victim v;
COMMIT;
EOF
}

# takeover_event: the first hand-out of a victim's service by another
# instance: "seconds|service|label", or nothing yet.
takeover_event() {
	demo_psql -F '|' <<'EOF'
SELECT round(extract(epoch FROM b.handed_out_at - v.stopped_at)::numeric, 3),
       b.service_id, i.label
  FROM demo.victim v
  JOIN gridha.batches b ON b.instance_id IS DISTINCT FROM v.instance_id
                       AND b.handed_out_at >= v.stopped_at
  JOIN demo.victim_services s ON s.service_id = b.service_id
  LEFT JOIN gridha.instances i ON i.instance_id = b.instance_id
 ORDER BY b.handed_out_at
 LIMIT 1;
EOF
}

# reclaim_state: "re-claimed|of|seconds until the last one" of the victim's
# former services.
reclaim_state() {
	demo_psql -F '|' <<'EOF'
WITH taken AS (
    SELECT s.service_id, min(l.at) AS at
      FROM demo.victim_services s
      CROSS JOIN demo.victim v
      LEFT JOIN demo.claim_log l ON l.service_id = s.service_id
                                AND l.at >= v.stopped_at
                                AND l.new_claimant IS NOT NULL
                                AND l.new_claimant <> v.instance_id
     GROUP BY s.service_id)
SELECT count(at), count(*),
       round(extract(epoch FROM max(at) - (SELECT stopped_at FROM demo.victim))::numeric, 3)
  FROM taken;
EOF
}

# now_us: the local clock in microseconds (only for the pace of the lines).
now_us() {
	echo "${EPOCHREALTIME//[!0-9]/}"
}

# run: progress lines until every batch is terminal or the time is up;
# stops the victim once half of the batches are committed. Returns 1 on
# timeout.
run() {
	section "progress (a line a second; ${VICTIM_LABEL} is stopped half-way)"
	local line elapsed committed terminal claims rate
	local stopped=0 took=0 reclaimed=0
	# the samples of the last RATE_WINDOW lines, for batches/s
	local -a past_elapsed=(0) past_committed=(0)
	local deadline=$((SECONDS + TIMEOUT)) now next_tick
	next_tick=$(now_us)
	while :; do
		line=$(progress) || line=""
		IFS='|' read -r elapsed committed terminal claims <<<"$line"
		if [ -n "$line" ]; then
			rate=$(awk -v c="$committed" -v pc="${past_committed[0]}" -v e="$elapsed" -v pe="${past_elapsed[0]}" \
				'BEGIN { d = e - pe; printf "%d", (d > 0 ? (c - pc) / d : 0) }')
			printf '  %5.1fs  committed %*d/%d  %3d/s  claims: %s\n' \
				"$elapsed" "${#TOTAL}" "$committed" "$TOTAL" "$rate" "$claims"
			past_elapsed+=("$elapsed")
			past_committed+=("$committed")
			if [ ${#past_elapsed[@]} -gt "$RATE_WINDOW" ]; then
				past_elapsed=("${past_elapsed[@]:1}")
				past_committed=("${past_committed[@]:1}")
			fi
		fi

		if [ "$stopped" -eq 0 ] && [ -n "$line" ] && [ $((committed * 2)) -ge "$TOTAL" ]; then
			local vlabel vid vn vok
			IFS='|' read -r vlabel vid vn vok < <(stop_victim) || true
			[ "$vok" = t ] || die "gridha.stop_worker could not stop $VICTIM_LABEL"
			say "  >> SELECT gridha.stop_worker('$vid');  -- $vlabel, holding $vn claims"
			stopped=1
		fi
		if [ "$stopped" -eq 1 ] && [ "$reclaimed" -eq 0 ]; then
			local rn rof rsec
			IFS='|' read -r rn rof rsec < <(reclaim_state) || true
			if [ -n "${rn:-}" ] && [ "$rn" = "$rof" ]; then
				say "  >> all $rof of ${VICTIM_LABEL}'s services re-claimed by the others, the last ${rsec}s after the stop"
				reclaimed=1
			fi
		fi
		if [ "$stopped" -eq 1 ] && [ "$took" -eq 0 ]; then
			local tsec tsvc tlabel
			IFS='|' read -r tsec tsvc tlabel < <(takeover_event) || true
			if [ -n "${tsec:-}" ]; then
				say "  >> ${tlabel:-another instance} handed out a batch of $tsvc ${tsec}s after the stop"
				took=1
			fi
		fi

		if [ -n "$line" ] && [ "$terminal" -ge "$TOTAL" ]; then
			return 0
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			say "  !! time is up (${TIMEOUT}s): $((TOTAL - ${terminal:-0})) batches are not final"
			return 1
		fi
		# the next line one second after the previous one, however long
		# the queries took
		next_tick=$((next_tick + 1000000))
		now=$(now_us)
		if [ "$now" -lt "$next_tick" ]; then
			sleep "$(printf '%d.%06d' $(((next_tick - now) / 1000000)) $(((next_tick - now) % 1000000)))"
		else
			next_tick=$now
		fi
	done
}

# leftovers: what is not final, after a timeout.
leftovers() {
	section "what is left"
	demo_psql -P footer=off -F ' ' <<'EOF'
SELECT '  ' || status, count(*) FROM gridha.batches
 WHERE status NOT IN ('committed', 'invalid') GROUP BY status ORDER BY status;
EOF
	say "  services not done (first 10):"
	demo_psql -F ' ' <<'EOF'
SELECT '    ' || q.service_id, 'head ' || q.head_batch_id, q.head_status,
       'queued ' || q.queued, 'claimant ' || coalesce(i.label, q.claimant::text, 'none')
  FROM gridha.service_queues q
  LEFT JOIN gridha.instances i ON i.instance_id = q.claimant
 WHERE q.queued + q.in_flight + q.retrying > 0
 ORDER BY q.service_id LIMIT 10;
EOF
	say "  workers:"
	demo_psql -F ' ' -c "SELECT '    ' || label, state, coalesce(batch_id, '') FROM gridha.workers ORDER BY label"
}

# ledger_stats: the ledger's counts, "posts accepted duplicates".
ledger_stats() {
	python3 - "$LEDGER/stats" <<'EOF'
import json, sys, urllib.request
s = json.load(urllib.request.urlopen(sys.argv[1], timeout=10))
print(s["posts"], s["accepted"], s["duplicates"])
EOF
}

# order_check: check_log.py against the enqueue order. Prints the number
# of violations (batches out of order, unexpected, two in flight in one
# service), then the number of batches that never reached the ledger, then
# a line per violation kind and the first violations.
order_check() {
	python3 "$REPO/test/dlt/check_log.py" --json --expected "$GRIDHA_TEST_DIR/expected.tsv" \
		--require-all --one-in-flight "$GRIDHA_TEST_DIR/ledger.log" 2>/dev/null |
		python3 -c '
import collections, json, sys
v = json.load(sys.stdin)["violations"]
missing = sum(x["kind"] == "missing" for x in v)
v = [x for x in v if x["kind"] != "missing"]
print(len(v))
print(missing)
for kind, n in sorted(collections.Counter(x["kind"] for x in v).items()):
    print("%s %d" % (kind, n))
for x in v[:5]:
    print("# " + x["message"])'
}

# summary: the counts and the takeover; returns non-zero when a batch was
# lost or the ledger saw an order violation.
summary() {
	section summary
	local committed invalid terminal secs
	IFS='|' read -r committed invalid terminal secs < <(demo_psql -F '|' <<'EOF'
SELECT count(*) FILTER (WHERE status = 'committed'),
       count(*) FILTER (WHERE status = 'invalid'),
       count(*) FILTER (WHERE status IN ('committed', 'invalid')),
       round(extract(epoch FROM max(finished_at) - (SELECT started_at FROM demo.run))::numeric, 1)
  FROM gridha.batches;
EOF
	)
	local lost=$((TOTAL - terminal))
	local posts accepted dups
	read -r posts accepted dups < <(ledger_stats) || true
	local check violations missing
	check=$(order_check) || true
	violations=$(sed -n 1p <<<"$check")
	missing=$(sed -n 2p <<<"$check")
	[ -n "$violations" ] || violations="?"

	printf '  enqueued           %d (%d services x %d)\n' "$TOTAL" "$SERVICES" "$BATCHES"
	local avg
	avg=$(awk -v c="$committed" -v s="${secs:-0}" 'BEGIN { printf "%d", (s > 0 ? c / s : 0) }')
	printf '  committed          %d  (the last one %ss after the enqueue: %d/s on average)\n' \
		"$committed" "${secs:-?}" "$avg"
	printf '  invalid            %d\n' "$invalid"
	printf '  lost               %d  (enqueued, not committed or invalid)\n' "$lost"
	printf '  at the ledger      %s POSTs: %s accepted, %s duplicates\n' "${posts:-?}" "${accepted:-?}" "${dups:-?}"
	printf '  order violations   %s  (test/dlt/check_log.py: enqueue order, one in flight per service)\n' "$violations"
	if [ "$violations" != 0 ]; then
		tail -n +3 <<<"$check" | sed 's/^/    /'
	fi
	if [ "${missing:-0}" != 0 ]; then
		printf '  never sent         %s  (enqueued batches that did not reach the ledger)\n' "$missing"
	fi

	local vat vheld released tsec tsvc tlabel rn rof rsec
	IFS='|' read -r vat vheld released < <(demo_psql -F '|' <<'EOF'
SELECT round(extract(epoch FROM v.stopped_at - r.started_at)::numeric, 1),
       (SELECT count(*) FROM demo.victim_services),
       (SELECT round(extract(epoch FROM i.stopped_at - v.stopped_at)::numeric, 3)
          FROM gridha.instances i
         WHERE i.instance_id = v.instance_id AND i.stopped_at >= v.stopped_at)
  FROM demo.victim v, demo.run r;
EOF
	) || true
	if [ -n "${vat:-}" ]; then
		IFS='|' read -r tsec tsvc tlabel < <(takeover_event) || true
		IFS='|' read -r rn rof rsec < <(reclaim_state) || true
		printf '  stopped            %s at %ss, holding %s claims; it released them %ss later\n' \
			"$VICTIM_LABEL" "$vat" "$vheld" "${released:-?}"
		if [ -n "${tsec:-}" ]; then
			printf '  takeover           %ss from the stop to the first hand-out of one of its services by another instance (%s by %s)\n' \
				"$tsec" "$tsvc" "$tlabel"
		else
			printf '  takeover           none: no other instance handed out any of its services\n'
		fi
		printf '  re-claimed         %s of its %s services, the last %ss after the stop\n' \
			"${rn:-?}" "${rof:-?}" "${rsec:-?}"
	else
		printf '  takeover           none: %s was not stopped\n' "$VICTIM_LABEL"
	fi
	local handed
	handed=$(grep -c '"event":"handout"' "$GRIDHA_TEST_DIR/client.log" 2>/dev/null) || true
	printf '  %-18s %s batches handed out to it and submitted (SQL API 1.2)\n' "$CLIENT_LABEL" "${handed:-0}"
	say "  gridha.instance_health:"
	demo_psql -F ' ' -c "SELECT '    ' || rpad(label, 10), rpad(kind, 9), health, 'claims ' || claims_held
	                     FROM gridha.instance_health ORDER BY kind DESC, label"
	say
	if [ "$lost" -eq 0 ] && [ "$violations" = 0 ]; then
		say "OK: nothing lost, every service in order at the ledger"
		return 0
	fi
	say "FAILED: $lost lost, $violations order violations"
	return 1
}

main() {
	trap cleanup EXIT
	trap 'echo "interrupted" >&2; exit 130' INT
	trap 'exit 143' TERM

	install_prerequisites
	build
	start_cluster
	setup_database
	wait_workers
	start_client
	enqueue
	local ok=0
	run || ok=1
	[ "$ok" -eq 0 ] || leftovers
	summary || ok=1
	return "$ok"
}

main "$@"
