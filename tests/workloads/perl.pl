#!/usr/bin/perl
# perl with fork, wait and signals (core modules only); one result line per
# check (README.md).
use strict;
use warnings;
use POSIX qw(:sys_wait_h :signal_h setsid);
use Time::HiRes qw(time sleep alarm);
$| = 1;

sub check {
	my ($name, $ok, $why) = @_;
	if ($ok) { print "\n\@\@wl ok perl.$name\n" }
	else     { print "\n\@\@wl fail perl.$name: " . ($why // "$!") . "\n" }
}

# fork and waitpid with an exit status
my $pid = fork();
if (defined $pid && $pid == 0) { POSIX::_exit(5) }
check("fork_waitpid", defined $pid && waitpid($pid, 0) == $pid && WEXITSTATUS($?) == 5);

# wait for any child, several children
my @kids = map { my $p = fork(); if ($p == 0) { POSIX::_exit(0) } $p } 1 .. 4;
my $reaped = 0;
$reaped++ while wait() > 0;
check("wait_many", $reaped == 4);

# a signal to a child, seen by its handler
pipe(my $r, my $w) or die;
$pid = fork();
if ($pid == 0) {
	close $r;
	local $SIG{USR1} = sub { print $w "got\n"; close $w; POSIX::_exit(0) };
	print $w "ready\n";
	$w->flush;
	sleep 10;
	POSIX::_exit(1);
}
close $w;
my $line = <$r>;
kill 'USR1', $pid;
$line = <$r>;
waitpid($pid, 0);
check("kill_handler", defined $line && $line eq "got\n" && $? == 0);

# sigprocmask, sigpending, sigsuspend
my $set = POSIX::SigSet->new(SIGUSR2);
my $old = POSIX::SigSet->new;
my $got = 0;
$SIG{USR2} = sub { $got++ };
check("sigprocmask", sigprocmask(SIG_BLOCK, $set, $old));
kill 'USR2', $$;
my $pend = POSIX::SigSet->new;
check("sigpending", sigpending($pend) && $pend->ismember(SIGUSR2));
check("sigsuspend", !POSIX::sigsuspend(POSIX::SigSet->new) && $got == 1, "got $got: $!");
sigprocmask(SIG_SETMASK, $old);

# alarm and pause (Time::HiRes's ualarm is setitimer)
my $fired = 0;
$SIG{ALRM} = sub { $fired++ };
my $t0 = time;
alarm(0.05);
POSIX::pause();
check("alarm_pause", $fired == 1 && time - $t0 > 0.02, "fired $fired after " . (time - $t0) . " s");
check("getitimer", defined((Time::HiRes::getitimer(Time::HiRes::ITIMER_REAL()))[0]));

# a pipe to a command, and system()
open(my $cmd, "-|", "echo", "hello") or die;
my $out = <$cmd>;
close $cmd;
check("pipe_open", $out eq "hello\n" && $? == 0);
check("system", system("sh", "-c", "exit 3") >> 8 == 3);
check("setsid", do { my $p = fork(); if ($p == 0) { POSIX::_exit(setsid() > 0 ? 0 : 1) } waitpid($p, 0); $? == 0 });
