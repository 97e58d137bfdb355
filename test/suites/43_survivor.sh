#!/usr/bin/env bash
# test/suites/43_survivor.sh: a crash, a graceful stop and one survivor;
# a paused instance past its hard expiry; an operator's expiry (issue 26,
# cases 2 and 3), played with real processes: psql sessions as instances.
#
# The common start (a database of its own per case, 10 services x
# SURVIVOR_BATCHES batches, default settings: soft expiry 30 s):
#   a   acquires (it is alone: it takes all 10), hands out one batch, and
#       its psql is killed (kill -9): its session ends, the batch stays
#       submitting under a's epoch
#   b   acquires (a's session is gone: all 10, the one submitting too),
#       hands out one batch, calls release_claims (the batch in hand keeps
#       its claim) and exits, as a clean shutdown does
# Case 2: c starts, the only instance working (a loop of next_batch ->
#   report_status('committed'), SURVIVOR_WORK_MS per batch, SURVIVOR_IDLE_MS
#   sleep after an empty poll). Checked: every service with work is held by
#   c within 1 s of its first idle poll, and within 1 s of its first poll
#   (a crashed, holding nothing once b took its claims, its lease still
#   running, and b released: neither counts as live), a's and b's late reports
#   (new sessions, their old epochs) are refused with RG001, hand-outs
#   keep each service's order, c's hand-outs carry epochs above a's and
#   b's, and every batch ends committed.
# Case 3: after the common start, c (its session with gridha.soft_expiry
#   1s, hard_expiry 2s, renew_interval 500ms: its lease runs out in real
#   time, nothing is moved by hand) hands out a batch on each service it
#   took (next_batches) and is frozen (SIGSTOP of its psql) until its hard
#   expiry has passed; d starts (default settings). Checked: d holds every
#   service with work within 1 s of its first idle poll and of its first
#   poll, d hands out again each batch c left submitting under a bumped
#   epoch, c's late reports after SIGCONT (its own session) are refused
#   with RG001, order, every batch committed.
# Operator: e and f each hold 10 idle claims (their share of 20); one of
#   e's services gets work and e hands out its head (in flight, e live and
#   idle, its session open); f polls. Checked: f does not take e's head in
#   flight while e lives; after an operator's UPDATE gridha.service_claims
#   SET hard_expiry = now() - interval '1 s' on that claim, f holds it
#   within 1 s and hands its head out again under a bumped epoch; e's late
#   report is refused; order.
#
# The measured seconds (server clock: survivor_watch sees every service
# with work held by the survivor; survivor_loop records its first poll and
# first empty poll) are printed as TAP comments, and appended to
# SURVIVOR_FIGURES when set (test/bench/scale.sh, part survivor).
#
# Environment: SURVIVOR_BATCHES [8] SURVIVOR_WORK_MS [20] SURVIVOR_IDLE_MS
# [100] SURVIVOR_SECONDS [15] (a survivor's loop and a watch end by then at
# the latest), SURVIVOR_CASES [2 3 op], SURVIVOR_FIGURES [unset].
set -uo pipefail

REPO=${GRIDHA_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
LIB=${GRIDHA_LIB:-$REPO/test/lib.sh}
SURVIVOR_BATCHES=${SURVIVOR_BATCHES:-8}
SURVIVOR_WORK_MS=${SURVIVOR_WORK_MS:-20}
SURVIVOR_IDLE_MS=${SURVIVOR_IDLE_MS:-100}
SURVIVOR_SECONDS=${SURVIVOR_SECONDS:-15}
SURVIVOR_CASES=${SURVIVOR_CASES:-2 3 op}
FAILED=0
PIDS=()
DBS=()
declare -A SFD SPID

# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$LIB"
# shellcheck source-path=SCRIPTDIR source=../tap.sh
. "$REPO/test/tap.sh"
n_plan=0
for c in $SURVIVOR_CASES; do
	case $c in
		2) n_plan=$((n_plan + 7)) ;;
		3) n_plan=$((n_plan + 6)) ;;
		op) n_plan=$((n_plan + 5)) ;;
	esac
done
plan "$n_plan"

suite_work 43_survivor

psql_db() {
	psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$DB" "$@"
}

cleanup() {
	local p d
	for p in "${PIDS[@]}"; do
		kill -CONT "$p" 2>/dev/null
		kill -TERM "$p" 2>/dev/null
	done
	for p in "${PIDS[@]}"; do
		wait "$p" 2>/dev/null
	done
	for d in "${DBS[@]}"; do
		psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null 2>&1
	done
}
trap cleanup EXIT

# new_db NAME: database NAME (made afresh, with 43_survivor.sql) becomes DB
new_db() {
	DB=$1
	DBS+=("$DB")
	psql -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" \
		-c "CREATE DATABASE $DB" >/dev/null || exit 1
	psql_db -f "$REPO/test/suites/43_survivor.sql" >/dev/null || exit 1
}

# sess_open NAME [PGOPTIONS]: instance NAME's psql session (application
# name survivor-NAME) that runs what sess/sess_send write to it
sess_open() {
	local fifo=$WORK/$1.fifo fd
	rm -f "$fifo"
	mkfifo "$fifo"
	: >"$WORK/$1.out"
	PGAPPNAME=survivor-$1 PGOPTIONS=${2:-} psql -X -q -A -t -d "$DB" <"$fifo" >>"$WORK/$1.out" 2>&1 &
	SPID[$1]=$!
	PIDS+=("$!")
	exec {fd}>"$fifo"
	SFD[$1]=$fd
	rm -f "$fifo"
}

# sess_send NAME SQL: SQL to the session, not waited for
sess_send() {
	printf '%s\n' "$2" >&"${SFD[$1]}"
}

# sess NAME SQL: runs SQL (one statement, no semicolon) in the session
# and prints its result once it is done (SESS_WAIT, 10 s, at most). The
# result goes to a file of its own (\g), closed when the statement ends,
# then a shell command (\!) marks it done: psql's output to a file is
# buffered, these are not.
sess() {
	local res
	res=$WORK/$1.res.$(date +%s%N)	# sess runs in $(...): no counter survives
	printf '%s \\g %s\n\\! touch %s\n' "$2" "$res" "$res.done" >&"${SFD[$1]}"
	wait_until "${SESS_WAIT:-10}" test -e "$res.done" || return 1
	cat "$res"
}

# sess_close NAME: end of input, psql exits and its session ends
sess_close() {
	local fd=${SFD[$1]}
	exec {fd}>&-
}

# gone NAME: no backend of instance NAME's session is left
gone() {
	[ "$(psql_db -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'survivor-$1'")" = 0 ]
}

inst() {
	psql_db -c "SELECT survivor_instance('$1')"
}

# common_start: a takes all, hands out one batch, dies; b takes them, hands
# out one, releases and exits
common_start() {
	local a_took b_took b_released
	psql_db -c "CALL survivor_enqueue('v', 10, $SURVIVOR_BATCHES)" >/dev/null
	sess_open a
	a_took=$(sess a "SELECT count(*) FROM gridha.acquire_claims(survivor_instance('a'))")
	sess a "SELECT survivor_handout('a', 1)" >/dev/null
	kill -9 "${SPID[a]}"
	wait "${SPID[a]}" 2>/dev/null
	sess_close a
	wait_until 10 gone a || echo "a's backend is still there" | diag
	sess_open b
	b_took=$(sess b "SELECT count(*) FROM gridha.acquire_claims(survivor_instance('b'))")
	sess b "SELECT survivor_handout('b', 1)" >/dev/null
	b_released=$(sess b "SELECT gridha.release_claims(survivor_instance('b'))")
	sess_close b
	wait_until 10 gone b || echo "b's backend is still there" | diag
	echo "start: a took $a_took and was killed, b took $b_took, released $b_released and exited;" \
		"$(psql_db -c "SELECT count(*) FILTER (WHERE claimant IS NULL) || ' free, '
		                      || count(*) FILTER (WHERE claimant = survivor_instance('b')) || ' held by b'
		                 FROM gridha.service_claims")" | diag
}

# watch_start NAME: survivor_watch of NAME in the background (WATCH_PID)
watch_start() {
	psql_db -c "CALL survivor_watch('$1', $SURVIVOR_SECONDS)" >"$WORK/watch.out" 2>&1 &
	WATCH_PID=$!
	PIDS+=("$WATCH_PID")
	sleep 0.3
}

# loop_start NAME: survivor_loop of NAME in a session of its own (LOOP_PID)
loop_start() {
	PGAPPNAME=survivor-$1 psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$DB" \
		-c "CALL survivor_loop('$1', $SURVIVOR_SECONDS, $SURVIVOR_IDLE_MS, $SURVIVOR_WORK_MS)" \
		>"$WORK/loop-$1.out" 2>&1 &
	LOOP_PID=$!
	PIDS+=("$LOOP_PID")
}

# held_checks CASE NAME: the timing tests of survivor NAME (its watch and
# loop must have ended): every service with work held within 1 s of its
# first idle poll, and within 1 s of its first poll: it is the only live
# instance, so its work share is all the work (a crashed instance stops
# counting at once, issue 26, "Live means able to work"). Prints the
# seconds from its first poll and from its first idle poll.
held_checks() {
	local held row first idle s_first s_idle
	held=$(cat "$WORK/watch.out")
	row=$(psql_db -c "SELECT extract(epoch FROM first_poll), coalesce(extract(epoch FROM first_idle)::text, '')
	                    FROM survivor_polls WHERE who = '$2'")
	first=${row%%|*}
	idle=${row#*|}
	if [[ $held =~ ^[0-9.]+$ ]]; then
		s_first=$(awk -v h="$held" -v f="$first" 'BEGIN { printf "%.3f", h - f }')
		if [ -n "$idle" ]; then
			s_idle=$(awk -v h="$held" -v f="$idle" 'BEGIN { printf "%.3f", (h > f) ? h - f : 0 }')
		else
			s_idle=0.000
		fi
	else
		s_first=none
		s_idle=none
	fi
	echo "case $1: every service with work held by $2 ${s_first} s after its first poll," \
		"${s_idle} s after its first idle poll (0: held before it)" \
		"${idle:+(first idle poll $(awk -v i="$idle" -v f="$first" 'BEGIN { printf "%.3f", i - f }') s after the first poll)}" | diag
	[ -z "${SURVIVOR_FIGURES:-}" ] || echo "case$1 $s_first $s_idle" >>"$SURVIVOR_FIGURES"
	[ "$s_idle" != none ] && awk -v s="$s_idle" 'BEGIN { exit !(s <= 1.0) }'
	check $? "case $1: $2 holds every service with work within 1 s of its first idle poll"
	[ "$s_first" != none ] && awk -v s="$s_first" 'BEGIN { exit !(s <= 1.0) }'
	check $? "case $1: $2, the only live instance, holds every service with work within 1 s of its first poll (a, crashed, does not count)"
	if [ "$s_first" = none ]; then
		psql_db -c "SELECT service_id || ' held by ' || coalesce(claimant::text, 'nobody') || ', epoch ' || epoch
		              FROM gridha.service_claims ORDER BY 1" | diag
	fi
}

# late_check CASE NAME SESSION [SERVICE]: NAME's late reports (accepted,
# then committed) of the last batch of each service it was handed (of
# SERVICE only, when given), in SESSION (an open one; "" for a new one),
# are all refused with RG001
late_check() {
	local a c only=${4:-%}
	if [ -n "${3:-}" ]; then
		a=$(sess "$3" "SELECT survivor_late('$2', 'accepted', '$only')")
		c=$(sess "$3" "SELECT survivor_late('$2', 'committed', '$only')")
	else
		a=$(psql_db -c "SELECT survivor_late('$2', 'accepted', '$only')" 2>&1)
		c=$(psql_db -c "SELECT survivor_late('$2', 'committed', '$only')" 2>&1)
	fi
	[[ $a =~ ^RG001\ x\ [0-9]+$ ]] && [[ $c =~ ^RG001\ x\ [0-9]+$ ]]
	check $? "case $1: $2's late reports (accepted: $a; committed: $c) are refused with RG001"
}

order_check() {
	local v
	v=$(psql_db -c "SELECT count(*) FROM survivor_order_violations()")
	[ "$v" = 0 ]
	check $? "case $1: every hand-out came after every earlier batch of its service was committed ($v violations)"
	[ "$v" = 0 ] || psql_db -c "SELECT * FROM survivor_order_violations() LIMIT 5" | diag
}

committed_check() {
	local left
	left=$(psql_db -c "SELECT count(*) FROM gridha.batches WHERE status <> 'committed'")
	[ "$left" = 0 ]
	check $? "case $1: every batch ($(psql_db -c "SELECT count(*) FROM gridha.batches")) ends committed ($left not)"
}

# wait_pid PID SECONDS
wait_pid() {
	local deadline=$((SECONDS + $2))
	while kill -0 "$1" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
	kill "$1" 2>/dev/null
	wait "$1" 2>/dev/null
}

# ---------------------------------------------------------------------------
# case 2: a crash, a graceful stop, one survivor
# ---------------------------------------------------------------------------

case2() {
	new_db gridha_survivor2
	common_start
	watch_start c
	loop_start c
	wait_pid "$WATCH_PID" $((SURVIVOR_SECONDS + 5))
	late_check 2 a
	late_check 2 b
	wait_pid "$LOOP_PID" $((SURVIVOR_SECONDS + 5))
	held_checks 2 c
	order_check 2
	v=$(psql_db -c "SELECT count(*) FROM survivor_log l
	                 WHERE l.who = 'c' AND l.epoch <= (SELECT max(o.epoch) FROM survivor_log o
	                                                    WHERE o.who IN ('a', 'b') AND o.service_id = l.service_id)")
	n=$(psql_db -c "SELECT count(*) FROM survivor_log WHERE who = 'c'")
	[ "$v" = 0 ] && [ "$n" -gt 0 ]
	check $? "case 2: c's $n hand-outs carry epochs above a's and b's on their service ($v do not)"
	committed_check 2
}

# ---------------------------------------------------------------------------
# case 3: a paused instance past its hard expiry
# ---------------------------------------------------------------------------

case3() {
	local c_handed c_held
	new_db gridha_survivor3
	common_start
	sess_open c "-c gridha.soft_expiry=1s -c gridha.hard_expiry=2s -c gridha.renew_interval=500ms"
	c_handed=$(sess c "SELECT survivor_handout('c', 10)")
	c_held=$(psql_db -c "SELECT count(*) FROM gridha.service_claims WHERE claimant = survivor_instance('c')")
	kill -STOP "${SPID[c]}"
	past_hard() {
		[ "$(psql_db -c "SELECT hard_expiry < now() - interval '200 ms' FROM gridha.instances
		                  WHERE instance_id = survivor_instance('c')")" = t ]
	}
	wait_until 10 past_hard || echo "c's hard expiry has not passed" | diag
	echo "case 3: c took $c_held services, handed out $c_handed batches and was stopped until past its hard expiry" | diag
	watch_start d
	loop_start d
	wait_pid "$WATCH_PID" $((SURVIVOR_SECONDS + 5))
	kill -CONT "${SPID[c]}"
	# d holds the work at once, but its loop hands the batches out one
	# after the other (its loop sleeps between them): wait for them
	not_resent() {
		v=$(psql_db -c "SELECT count(*) FROM survivor_log l
		                 WHERE l.who = 'c'
		                   AND NOT EXISTS (SELECT 1 FROM survivor_log x
		                                    WHERE x.who = 'd' AND x.service_id = l.service_id
		                                      AND x.batch_id = l.batch_id AND x.epoch > l.epoch
		                                      AND x.attempt > l.attempt)")
		[ "$v" = 0 ]
	}
	wait_until 10 not_resent
	[ "$v" = 0 ] && [ "$c_handed" -gt 0 ]
	check $? "case 3: d handed out again, under a bumped epoch, each of the $c_handed batches c left submitting ($v not)"
	late_check 3 c c
	sess_close c
	wait_pid "$LOOP_PID" $((SURVIVOR_SECONDS + 5))
	held_checks 3 d
	order_check 3
	committed_check 3
}

# ---------------------------------------------------------------------------
# an operator's expiry of one claim of a live instance
# ---------------------------------------------------------------------------

case_op() {
	local x before t_op held s
	new_db gridha_survivor_op
	psql_db -c "CALL survivor_enqueue('o', 20, 1)" >/dev/null
	sess_open e
	sess_open f
	sess e "SELECT gridha.renew_claims(survivor_instance('e'))" >/dev/null
	sess f "SELECT gridha.renew_claims(survivor_instance('f'))" >/dev/null
	sess e "SELECT count(*) FROM gridha.acquire_claims(survivor_instance('e'))" >/dev/null
	sess f "SELECT count(*) FROM gridha.acquire_claims(survivor_instance('f'))" >/dev/null
	sess e "SELECT survivor_cycle_all('e')" >/dev/null
	sess f "SELECT survivor_cycle_all('f')" >/dev/null
	x=$(psql_db -c "SELECT min(service_id) FROM gridha.service_claims WHERE claimant = survivor_instance('e')")
	psql_db -c "SELECT gridha.enqueue('$x', 'b' || lpad(i::text, 3, '0'), '\\x00') FROM generate_series(2, 3) AS i" >/dev/null
	sess e "SELECT survivor_handout('e', 1)" >/dev/null
	echo "operator: claims e/f $(psql_db -c "SELECT count(*) FILTER (WHERE claimant = survivor_instance('e')) || '/'
	                                                || count(*) FILTER (WHERE claimant = survivor_instance('f'))
	                                           FROM gridha.service_claims"), e's $x in flight" | diag
	sess_send f "CALL survivor_loop('f', $SURVIVOR_SECONDS, $SURVIVOR_IDLE_MS, $SURVIVOR_WORK_MS);"
	idled() {
		[ "$(psql_db -c "SELECT first_idle < now() - interval '1200 ms' FROM survivor_polls WHERE who = 'f'")" = t ]
	}
	wait_until 10 idled || echo "f has not polled idle" | diag
	before=$(psql_db -c "SELECT claimant = survivor_instance('e') FROM gridha.service_claims WHERE service_id = '$x'")
	[ "$before" = t ]
	check $? "operator: f, idle, leaves e's head in flight with e while e lives"
	watch_start f
	t_op=$(psql_db -c "UPDATE gridha.service_claims SET hard_expiry = now() - interval '1 s'
	                    WHERE service_id = '$x' RETURNING extract(epoch FROM clock_timestamp())")
	wait_pid "$WATCH_PID" $((SURVIVOR_SECONDS + 5))
	held=$(cat "$WORK/watch.out")
	if [[ $held =~ ^[0-9.]+$ ]]; then
		s=$(awk -v h="$held" -v t="$t_op" 'BEGIN { printf "%.3f", (h > t) ? h - t : 0 }')
	else
		s=none
	fi
	echo "operator: f held e's expired claim $s s after the UPDATE" | diag
	[ -z "${SURVIVOR_FIGURES:-}" ] || echo "op $s" >>"$SURVIVOR_FIGURES"
	[ "$s" != none ] && awk -v s="$s" 'BEGIN { exit !(s <= 1.0) }'
	check $? "operator: an idle f holds the claim whose hard_expiry an operator moved into the past within 1 s"
	late_check op e e "$x"
	SESS_WAIT=$((SURVIVOR_SECONDS + 5)) sess f "SELECT 1" >/dev/null	# f's loop has ended
	v=$(psql_db -c "SELECT count(*) FROM survivor_log x JOIN survivor_log l USING (service_id, batch_id)
	                 WHERE l.who = 'e' AND x.who = 'f' AND x.epoch > l.epoch AND x.attempt > l.attempt")
	[ "$v" = 1 ]
	check $? "operator: f handed e's batch out again under a bumped epoch"
	order_check op
}

for c in $SURVIVOR_CASES; do
	case $c in
		2) case2 ;;
		3) case3 ;;
		op) case_op ;;
	esac
done

[ "$FAILED" -eq 0 ]
