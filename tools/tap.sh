# shellcheck shell=bash
# Sourced by tools/check.sh and .ci/run: every test stage reports in TAP
# (https://testanything.org), and tap_sum adds it up.
#
#   ok N - what                 a test passed
#   not ok N - what             a test failed
#   ok N - what # SKIP why      a test that cannot run here (C tests:
#                               harness_skip, tests/skip.h)
#
# Nested tests (node's subtests, indented) count once each; a line that
# sums a group (right after the group's indented plan "1..N") does not. Plans
# and comments (# ...) are not counted. One adapter, for a stage that only
# prints a summary: a line
#   check-NAME: N passed, M failed, S skipped
# counts as N passes, M failures and S skips.
#
# tap_sum FILE...: prints "PASSED FAILED SKIPPED" over the files.
tap_sum() {
	cat "$@" 2>/dev/null | tr -d '\r' | awk '
		{ match($0, /^ */); ind = RLENGTH; line = substr($0, ind + 1) }
		line ~ /^1\.\.[0-9]+/ { plan = ind; next }
		line ~ /^(not )?ok( |$)/ && plan > ind { plan = -1; next } # a group
		{ plan = -1 }
		line ~ /^not ok( |$)/ { f++; next }
		line ~ /^ok( |$)/ { if (line ~ /# [Ss][Kk][Ii][Pp]/) s++; else p++; next }
		/^check-[a-z0-9-]+: [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$/ {
			p += $2; f += $4; s += $6; next
		}
		END { print p + 0, f + 0, s + 0 }'
}
