/*
 * spank_scratchkeeper: scratchkeeper's staging options and job hooks for Slurm (spank(8)).
 *
 *   --stage-in=SRC:DST    a file a data job copies from SRC (a URI) to DST (an absolute path)
 *   --stage-out=SRC:DST   a file a data job copies from SRC (an absolute path) to DST (a URI)
 *
 * Both may be repeated, on the command line or as "#SBATCH --stage-in=..." lines. SRC and DST
 * are split at the LAST ':' whose remainder is a destination of the right kind: for --stage-in
 * a remainder starting with '/', for --stage-out one starting with "scheme://". So
 * "ftp://host:2811/x:/scratch/x" stages ftp://host:2811/x to /scratch/x.
 *
 * In sbatch (allocator context) the values are checked and handed to the job as the control
 * environment variables SCRATCHKEEPER_STAGE_IN / SCRATCHKEEPER_STAGE_OUT (newline-separated),
 * which slurmctld's job_submit.lua reads to hold the job until `scratchkeeper spank chain` has
 * chained its data jobs (docs/slurm-plugins.rst).
 *
 * On the nodes (job script context):
 *   slurm_spank_job_prolog  refuses the job when the scratch mount is down (not mounted, dead:
 *                           ENOTCONN, or no statfs answer within mount_timeout), after running
 *                           the node health check, which drains the node with scratchkeeper's
 *                           reason; then asks recoveryd "check-job" (its Unix socket, or with
 *                           head= the head's service over TCP with a MUNGE credential) and
 *                           waits, with a timeout, until the job's staged inputs are whole;
 *   slurm_spank_job_epilog  runs `scratchkeeper replicas job-ended JOBID` for replicad.
 * In the job's tasks (remote context, as the user, stderr the job's output):
 *   slurm_spank_task_init   prints one line to the job's stderr when the scratch mount is down,
 *                           and for the batch script leaves a watcher that prints one line when
 *                           the mount goes down while the job runs and one when it is back.
 *
 * plugstack.conf arguments (all optional):
 *   socket=PATH         recoveryd socket     (default /run/scratchkeeper/recoveryd.sock)
 *   head=HOST:PORT      the head node's service (recoveryd's head.listen): check-job goes there
 *                       over TCP instead of the socket (default: none, the socket)
 *   munge_socket=PATH   this host's munged (default libmunge's, /run/munge/munge.socket.2)
 *   head_wait=S         how long connections head= refuses (the head is up, its service is
 *                       not: stopped or restarting) are tried again (default 10); a head
 *                       that does not answer at all (a partition) is tried for prolog_timeout
 *   prolog_timeout=S    longest wait for recovery in the prolog (default 600)
 *   scratchkeeper=PATH  the scratchkeeper command (default /usr/local/bin/scratchkeeper)
 *   config=PATH         site config passed as --config (default: scratchkeeper's own default)
 *   epilog_timeout=S    longest run of the epilog command (default 30)
 *   epilog=no           do not notify the replication daemon
 *   scratch=PATH        the scratch mount the prolog and the tasks check (default /scratch)
 *   healthcheck=PATH    the node health check the prolog runs on a dead mount to drain the
 *                       node (default: none; the node is then drained by Slurm as "Prolog error")
 *   mount_timeout=S     longest wait for the scratch mount's statfs (default 10)
 *   watch=S             the batch script's watcher checks the mount every S seconds (default
 *                       5; 0: no watcher)
 *   lost_input=run      a staged input that cannot be made whole is logged and the job runs
 *                       (default refuse: the prolog fails, as the plugin always did)
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/statvfs.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <munge.h>
#include <slurm/slurm.h>
#include <slurm/spank.h>

SPANK_PLUGIN(scratchkeeper, 1);

/* What a job prolog returns to fail (see slurm_spank_job_prolog) */
#define PROLOG_FAILS (-1)
#define MAX_REQUESTS 64
#define MAX_VALUE 4096
#define MAX_REPLY (1 << 20)
/* The head's reply line: a credential of up to 960 KiB of payload in base64 (wire.MAX_LINE) */
#define MAX_HEAD_LINE ((960 << 10) * 3 / 2 + 4096)
#define HEAD_CONNECT_TIMEOUT 5.0
/* The payloads' first lines (scratchkeeper/wire.py): what a credential was made for */
#define WIRE_REQUEST "scratchkeeper/1 request\n"
#define WIRE_REPLY "scratchkeeper/1 reply\n"
#define ENV_STAGE_IN "SCRATCHKEEPER_STAGE_IN"
#define ENV_STAGE_OUT "SCRATCHKEEPER_STAGE_OUT"

/* Schemes scratchkeeper's transfer layer has a client for (scratchkeeper/transfer/uri.py). */
static const char *_schemes[] = {"gsiftp", "ftp", "http", "https", "file", "scp", NULL};

/* The option values given to this sbatch; the callback has no spank handle, so they wait
 * here until slurm_spank_init_post_opt can put them in the job's control environment. */
static char *_stage_in[MAX_REQUESTS];
static char *_stage_out[MAX_REQUESTS];
static int _stage_in_count;
static int _stage_out_count;

static char _socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)] =
	"/run/scratchkeeper/recoveryd.sock";
static char _command[1024] = "/usr/local/bin/scratchkeeper";
static char _config[1024] = "";
static int _prolog_timeout = 600;
static int _head_wait = 10;
/* the last connection to head= was refused (ECONNREFUSED): its service is not listening */
static int _head_refused;
static int _epilog_timeout = 30;
static int _epilog_enabled = 1;
static char _scratch[1024] = "/scratch";
static char _healthcheck[1024] = "";
static int _mount_timeout = 10;
static int _watch_interval = 5;
static int _lost_input_runs = 0;
static char _head_host[256] = "";
static char _head_port[8] = "";
static char _head_address[272] = "";
static char _munge_socket[sizeof(((struct sockaddr_un *)0)->sun_path)] = "";

static int _opt_stage_in(int val, const char *optarg, int remote);
static int _opt_stage_out(int val, const char *optarg, int remote);

static struct spank_option _options[] = {
	{"stage-in", "SRC:DST",
	 "scratchkeeper: stage SRC (URI) in to DST (absolute path) before the job starts",
	 1, 0, _opt_stage_in},
	{"stage-out", "SRC:DST",
	 "scratchkeeper: stage SRC (absolute path) out to DST (URI) after the job ends",
	 1, 0, _opt_stage_out},
	SPANK_OPTIONS_TABLE_END
};

/* Length of a "scheme://" prefix naming a scheme we know, 0 if none; -1 for an unknown one. */
static int _scheme_prefix(const char *text)
{
	const char *p = text;
	size_t len;
	int i;

	if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
		return 0;
	while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
	       (*p >= '0' && *p <= '9') || *p == '+' || *p == '.' || *p == '-')
		p++;
	if (strncmp(p, "://", 3) != 0)
		return 0;
	len = (size_t)(p - text);
	for (i = 0; _schemes[i]; i++)
		if (strlen(_schemes[i]) == len && strncasecmp(text, _schemes[i], len) == 0)
			return (int)len + 3;
	return -1;
}

/*
 * Check one SRC:DST value; on error write the reason to why and return -1.
 * The split is the last ':' whose remainder is a DST of the right kind (see the top).
 */
static int _check_request(const char *option, const char *value, int stage_in,
			  char *why, size_t why_len)
{
	const char *split = NULL, *p, *src_uri;
	size_t src_len;
	int rc;

	if (!value || !*value) {
		snprintf(why, why_len, "--%s needs SRC:DST", option);
		return -1;
	}
	if (strlen(value) >= MAX_VALUE) {
		snprintf(why, why_len, "--%s value longer than %d bytes", option, MAX_VALUE - 1);
		return -1;
	}
	if (strchr(value, '\n') || strchr(value, '\t')) {
		snprintf(why, why_len, "--%s=%s: no newline or tab allowed", option, value);
		return -1;
	}
	if (value[strlen(value) - 1] == ':') {
		snprintf(why, why_len, "--%s=%s: empty DST", option, value);
		return -1;
	}
	for (p = value; (p = strchr(p, ':')); p++) {
		if (stage_in ? p[1] == '/' : _scheme_prefix(p + 1) != 0)
			split = p;
	}
	if (!split) {
		if (!strchr(value, ':'))
			snprintf(why, why_len, "--%s=%s: expected SRC:DST (no ':' found)", option, value);
		else
			snprintf(why, why_len, "--%s=%s: expected SRC:DST with DST %s", option, value,
				 stage_in ? "an absolute path (SRC:/path)" : "a URI (SRC:scheme://...)");
		return -1;
	}
	src_len = (size_t)(split - value);
	if (src_len == 0) {
		snprintf(why, why_len, "--%s=%s: empty SRC", option, value);
		return -1;
	}
	/* The remote side: SRC of a stage-in, DST of a stage-out. */
	src_uri = stage_in ? value : split + 1;
	rc = _scheme_prefix(src_uri);
	if (rc < 0) {
		int n = (int)strcspn(src_uri, ":");
		snprintf(why, why_len, "--%s=%s: unknown scheme '%.*s' (known: gsiftp, ftp, http, "
			 "https, file, scp)", option, value, n, src_uri);
		return -1;
	}
	if (rc == 0 || strlen(src_uri + rc) == 0 ||
	    (stage_in && (size_t)rc >= src_len)) {
		snprintf(why, why_len, "--%s=%s: %s must be a URI scheme://...", option, value,
			 stage_in ? "SRC" : "DST");
		return -1;
	}
	if (stage_in) {
		if (split[1] != '/' || split[2] == '\0') {
			snprintf(why, why_len, "--%s=%s: empty DST path", option, value);
			return -1;
		}
	} else if (value[0] != '/' || src_len < 2) {
		snprintf(why, why_len, "--%s=%s: SRC must be an absolute path", option, value);
		return -1;
	}
	return 0;
}

static int _record_option(const char *option, const char *optarg, int stage_in)
{
	char why[MAX_VALUE + 256];
	int *count = stage_in ? &_stage_in_count : &_stage_out_count;
	char **slots = stage_in ? _stage_in : _stage_out;

	if (_check_request(option, optarg, stage_in, why, sizeof(why)) < 0) {
		slurm_error("scratchkeeper: %s", why);
		return -1;
	}
	if (*count >= MAX_REQUESTS) {
		slurm_error("scratchkeeper: more than %d --%s options", MAX_REQUESTS, option);
		return -1;
	}
	if (!(slots[*count] = strdup(optarg))) {
		slurm_error("scratchkeeper: --%s: %m", option);
		return -1;
	}
	(*count)++;
	return 0;
}

static int _opt_stage_in(int val, const char *optarg, int remote)
{
	(void)val;
	/* Remote contexts see the option again: it was checked and used in sbatch already. */
	if (remote)
		return 0;
	return _record_option("stage-in", optarg, 1);
}

static int _opt_stage_out(int val, const char *optarg, int remote)
{
	(void)val;
	if (remote)
		return 0;
	return _record_option("stage-out", optarg, 0);
}

static int _parse_int(const char *text, int *out)
{
	char *end;
	long value;

	errno = 0;
	value = strtol(text, &end, 10);
	if (errno || end == text || *end || value < 0 || value > 86400 * 7)
		return -1;
	*out = (int)value;
	return 0;
}

static int _copy_arg(char *dst, size_t size, const char *value, const char *name)
{
	if (strlen(value) >= size || !*value) {
		slurm_error("scratchkeeper: plugstack argument %s: empty or too long", name);
		return -1;
	}
	strcpy(dst, value);
	return 0;
}

/* head=HOST:PORT (HOST a name, an IPv4 address or a [bracketed] IPv6 one); empty: none. */
static int _parse_head(const char *value)
{
	const char *colon = strrchr(value, ':'), *host = value;
	size_t host_len = colon ? (size_t)(colon - value) : 0;
	int port = 0;

	_head_host[0] = _head_address[0] = '\0';
	if (!*value)
		return 0;
	if (host_len >= 2 && host[0] == '[' && colon[-1] == ']') {
		host++;
		host_len -= 2;
	}
	if (!colon || !host_len || host_len >= sizeof(_head_host) ||
	    strlen(value) >= sizeof(_head_address) || _parse_int(colon + 1, &port) < 0 ||
	    port < 1 || port > 65535) {
		slurm_error("scratchkeeper: head=%s: expected HOST:PORT", value);
		return -1;
	}
	memcpy(_head_host, host, host_len);
	_head_host[host_len] = '\0';
	snprintf(_head_port, sizeof(_head_port), "%d", port);
	strcpy(_head_address, value);
	return 0;
}

static int _parse_args(int ac, char **av)
{
	int i;

	for (i = 0; i < ac; i++) {
		const char *arg = av[i];

		if (!strncmp(arg, "socket=", 7)) {
			if (_copy_arg(_socket_path, sizeof(_socket_path), arg + 7, "socket") < 0)
				return -1;
		} else if (!strncmp(arg, "head=", 5)) {
			if (_parse_head(arg + 5) < 0)
				return -1;
		} else if (!strncmp(arg, "munge_socket=", 13)) {
			if (_copy_arg(_munge_socket, sizeof(_munge_socket), arg + 13,
				      "munge_socket") < 0)
				return -1;
			if (_munge_socket[0] != '/') {
				slurm_error("scratchkeeper: munge_socket=%s: expected an absolute path",
					    _munge_socket);
				return -1;
			}
		} else if (!strncmp(arg, "scratchkeeper=", 14)) {
			if (_copy_arg(_command, sizeof(_command), arg + 14, "scratchkeeper") < 0)
				return -1;
		} else if (!strncmp(arg, "config=", 7)) {
			if (_copy_arg(_config, sizeof(_config), arg + 7, "config") < 0)
				return -1;
		} else if (!strncmp(arg, "head_wait=", 10)) {
			if (_parse_int(arg + 10, &_head_wait) < 0) {
				slurm_error("scratchkeeper: head_wait=%s: expected seconds", arg + 10);
				return -1;
			}
		} else if (!strncmp(arg, "prolog_timeout=", 15)) {
			if (_parse_int(arg + 15, &_prolog_timeout) < 0) {
				slurm_error("scratchkeeper: prolog_timeout=%s: expected seconds", arg + 15);
				return -1;
			}
		} else if (!strncmp(arg, "epilog_timeout=", 15)) {
			if (_parse_int(arg + 15, &_epilog_timeout) < 0 || _epilog_timeout == 0) {
				slurm_error("scratchkeeper: epilog_timeout=%s: expected seconds", arg + 15);
				return -1;
			}
		} else if (!strcmp(arg, "epilog=no")) {
			_epilog_enabled = 0;
		} else if (!strcmp(arg, "epilog=yes")) {
			_epilog_enabled = 1;
		} else if (!strncmp(arg, "scratch=", 8)) {
			if (_copy_arg(_scratch, sizeof(_scratch), arg + 8, "scratch") < 0)
				return -1;
			if (_scratch[0] != '/' || strchr(_scratch, '\n')) {
				slurm_error("scratchkeeper: scratch=%s: expected an absolute path", _scratch);
				return -1;
			}
			/* mountinfo lists the mount point without a trailing slash */
			while (strlen(_scratch) > 1 && _scratch[strlen(_scratch) - 1] == '/')
				_scratch[strlen(_scratch) - 1] = '\0';
		} else if (!strncmp(arg, "healthcheck=", 12)) {
			if (_copy_arg(_healthcheck, sizeof(_healthcheck), arg + 12, "healthcheck") < 0)
				return -1;
		} else if (!strncmp(arg, "mount_timeout=", 14)) {
			if (_parse_int(arg + 14, &_mount_timeout) < 0 || _mount_timeout == 0 ||
			    _mount_timeout > 60) {
				slurm_error("scratchkeeper: mount_timeout=%s: expected 1 to 60 seconds",
					    arg + 14);
				return -1;
			}
		} else if (!strncmp(arg, "watch=", 6)) {
			if (_parse_int(arg + 6, &_watch_interval) < 0 || _watch_interval > 3600) {
				slurm_error("scratchkeeper: watch=%s: expected 0 to 3600 seconds", arg + 6);
				return -1;
			}
		} else if (!strcmp(arg, "lost_input=run")) {
			_lost_input_runs = 1;
		} else if (!strcmp(arg, "lost_input=refuse")) {
			_lost_input_runs = 0;
		} else {
			slurm_error("scratchkeeper: unknown plugstack argument '%s'", arg);
			return -1;
		}
	}
	return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	struct spank_option *opt;
	spank_context_t context = spank_context();

	if (_parse_args(ac, av) < 0)
		return ESPANK_BAD_ARG;
	/* Options matter where users type them (sbatch, salloc, srun) and in slurmstepd, which
	 * must know them to accept the job's option environment. */
	if (context == S_CTX_JOB_SCRIPT || context == S_CTX_SLURMD)
		return ESPANK_SUCCESS;
	for (opt = _options; opt->name; opt++) {
		spank_err_t rc = spank_option_register(sp, opt);
		if (rc != ESPANK_SUCCESS) {
			slurm_error("scratchkeeper: cannot register --%s: %s", opt->name,
				    spank_strerror(rc));
			return rc;
		}
	}
	return ESPANK_SUCCESS;
}

static int _export(spank_t sp, const char *name, char **values, int count)
{
	size_t len = 1;
	char *joined;
	int i;
	spank_err_t rc;

	if (count == 0)
		return ESPANK_SUCCESS;
	for (i = 0; i < count; i++)
		len += strlen(values[i]) + 1;
	if (!(joined = calloc(1, len))) {
		slurm_error("scratchkeeper: %s: %m", name);
		return ESPANK_ERROR;
	}
	for (i = 0; i < count; i++) {
		if (i)
			strcat(joined, "\n");
		strcat(joined, values[i]);
	}
	rc = spank_job_control_setenv(sp, name, joined, 1);
	free(joined);
	if (rc != ESPANK_SUCCESS) {
		slurm_error("scratchkeeper: cannot pass %s to the job: %s", name, spank_strerror(rc));
		return rc;
	}
	return ESPANK_SUCCESS;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	int rc;

	(void)ac;
	(void)av;
	if (spank_context() != S_CTX_ALLOCATOR && spank_context() != S_CTX_LOCAL)
		return ESPANK_SUCCESS;
	if ((rc = _export(sp, ENV_STAGE_IN, _stage_in, _stage_in_count)) != ESPANK_SUCCESS)
		return rc;
	return _export(sp, ENV_STAGE_OUT, _stage_out, _stage_out_count);
}

static double _now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A path of /proc/self/mountinfo: space, tab, newline and backslash are octal escapes. */
static void _unescape_mountinfo(char *field)
{
	char *in = field, *out = field;

	while (*in) {
		if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' && in[2] >= '0' && in[2] <= '7' &&
		    in[3] >= '0' && in[3] <= '7') {
			*out++ = (char)((in[1] - '0') * 64 + (in[2] - '0') * 8 + (in[3] - '0'));
			in += 4;
		} else {
			*out++ = *in++;
		}
	}
	*out = '\0';
}

/* Whether /proc/self/mountinfo lists a mount at _scratch (1), not (0), unreadable (-1). */
static int _scratch_listed(void)
{
	FILE *info = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t size = 0;
	int found = 0;

	if (!info)
		return -1;
	while (!found && getline(&line, &size, info) > 0) {
		char *field = line, *save = NULL;
		int i;

		/* id parent major:minor root MOUNT_POINT ... */
		for (i = 0, field = strtok_r(line, " ", &save); field && i < 4; i++)
			field = strtok_r(NULL, " ", &save);
		if (!field)
			continue;
		_unescape_mountinfo(field);
		found = !strcmp(field, _scratch);
	}
	free(line);
	fclose(info);
	return found;
}

/*
 * Is the scratch mount up? 1 up; 0 down with the reason in why. statfs runs in a grandchild
 * (init reaps it) that reports its pid, then its errno, through a pipe: a dead FUSE mount
 * answers ENOTCONN at once, a hung one never answers, and a process blocked on a FUSE request
 * its server already read cannot be killed or reaped, so it is given up on after
 * _mount_timeout without being waited for (SIGKILLed: one still queued ends at once).
 */
static int _scratch_state(char *why, size_t why_len)
{
	struct {
		pid_t pid;
		int error;
	} report = {0, 0};
	size_t got = 0;
	double deadline;
	int fds[2], listed;
	pid_t child;

	listed = _scratch_listed();
	if (listed <= 0) {
		snprintf(why, why_len, listed < 0 ? "cannot read /proc/self/mountinfo" :
			 "not mounted");
		return 0;
	}
	if (pipe2(fds, O_CLOEXEC) < 0) {
		snprintf(why, why_len, "pipe: %s", strerror(errno));
		return 0;
	}
	child = fork();
	if (child < 0) {
		snprintf(why, why_len, "fork: %s", strerror(errno));
		close(fds[0]);
		close(fds[1]);
		return 0;
	}
	if (child == 0) {
		struct statvfs st;

		close(fds[0]);
		if (fork() == 0) {
			int fd = open("/dev/null", O_RDWR);

			/* it may outlive the hook: hold none of its descriptors (a pipe a reader
			 * waits to see closed: slurmd's, or the job's stderr) but the report's */
			if (fd >= 0) {
				dup2(fd, STDIN_FILENO);
				dup2(fd, STDOUT_FILENO);
				dup2(fd, STDERR_FILENO);
			}
			for (fd = STDERR_FILENO + 1; fd < 1024; fd++)
				if (fd != fds[1])
					close(fd);
			report.pid = getpid();
			if (write(fds[1], &report.pid, sizeof(report.pid)) < 0)
				_exit(1);
			report.error = statvfs(_scratch, &st) < 0 ? errno : 0;
			if (write(fds[1], &report.error, sizeof(report.error)) < 0)
				_exit(1);
			_exit(0);
		}
		_exit(0);
	}
	close(fds[1]);
	waitpid(child, NULL, 0);
	deadline = _now() + _mount_timeout;
	while (got < sizeof(report)) {
		struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
		int left_ms = (int)((deadline - _now()) * 1000), ready;
		ssize_t n;

		if (left_ms <= 0)
			break;
		ready = poll(&pfd, 1, left_ms);
		if (ready < 0 && errno == EINTR)
			continue;
		if (ready <= 0)
			break;
		n = read(fds[0], (char *)&report + got, sizeof(report) - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fds[0]);
	if (got < sizeof(report)) {
		if (got >= sizeof(report.pid) && report.pid > 0)
			kill(report.pid, SIGKILL);
		snprintf(why, why_len, "statfs did not answer within %ds", _mount_timeout);
		return 0;
	}
	if (report.error) {
		snprintf(why, why_len, "%s", strerror(report.error));
		return 0;
	}
	return 1;
}

/* Is "key":true in the JSON reply? (The service writes compact JSON; spaces tolerated.) */
static int _json_true(const char *reply, const char *key)
{
	char pattern[64];
	const char *p;

	snprintf(pattern, sizeof(pattern), "\"%s\"", key);
	if (!(p = strstr(reply, pattern)))
		return 0;
	p += strlen(pattern);
	while (*p == ' ' || *p == ':')
		p++;
	return !strncmp(p, "true", 4);
}

/* Copy the string value of "key" (unescaped enough for a log line) into out. */
static void _json_string(const char *reply, const char *key, char *out, size_t size)
{
	char pattern[64];
	const char *p;
	size_t n = 0;

	out[0] = '\0';
	snprintf(pattern, sizeof(pattern), "\"%s\"", key);
	if (!(p = strstr(reply, pattern)))
		return;
	p += strlen(pattern);
	while (*p == ' ' || *p == ':')
		p++;
	if (*p++ != '"')
		return;
	while (*p && *p != '"' && n + 1 < size) {
		if (*p == '\\' && p[1])
			p++;
		out[n++] = *p++;
	}
	out[n] = '\0';
}

/* Wait until fd is ready for events, up to deadline: 1 ready, 0 timed out, -1 error (errno). */
static int _wait_fd(int fd, short events, double deadline)
{
	struct pollfd pfd = {.fd = fd, .events = events};

	for (;;) {
		int left_ms = (int)((deadline - _now()) * 1000), ready;

		if (left_ms <= 0)
			return 0;
		ready = poll(&pfd, 1, left_ms);
		if (ready >= 0 || errno != EINTR)
			return ready;
	}
}

enum { _LINE_DONE, _LINE_TIMEOUT, _LINE_CLOSED, _LINE_ERROR };

/* Read into buf (NUL-terminated) until a newline or a full buf, up to deadline: a _LINE_*. */
static int _read_line(int fd, char *buf, size_t size, double deadline, size_t *got)
{
	*got = 0;
	buf[0] = '\0';
	while (*got + 1 < size && !memchr(buf, '\n', *got)) {
		int ready = _wait_fd(fd, POLLIN, deadline);
		ssize_t n;

		if (ready <= 0)
			return ready ? _LINE_ERROR : _LINE_TIMEOUT;
		n = read(fd, buf + *got, size - 1 - *got);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0 && errno != ECONNRESET)
			return _LINE_ERROR;
		if (n <= 0)
			return _LINE_CLOSED;
		*got += (size_t)n;
		buf[*got] = '\0';
	}
	return _LINE_DONE;
}

/* What recoveryd's check-job reply says: 1 whole, 0 not whole or refused (reason in why). */
static int _judge_reply(const char *reply, char *why, size_t why_len)
{
	if (!_json_true(reply, "ok")) {
		char error[512];

		_json_string(reply, "error", error, sizeof(error));
		snprintf(why, why_len, "recovery service refused: %s", error);
		return 0;
	}
	if (_json_true(reply, "whole"))
		return 1;
	_json_string(reply, "reason", why, why_len);
	return 0;
}

/*
 * Ask recoveryd on its Unix socket whether the job's staged inputs are whole, waiting up to
 * _prolog_timeout. Returns 1 whole, 0 not whole (reason in why), -1 service unreachable.
 */
static int _check_job_socket(uint32_t job_id, char *why, size_t why_len)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	char request[256], *reply;
	size_t got;
	int fd, rc = -1;

	/* the whole line the service may send (recovery/client.py MAX_LINE): a reply cut at a
	 * buffer's end would lose its "ok" and read as a refusal */
	if (!(reply = malloc(MAX_REPLY))) {
		snprintf(why, why_len, "%s", strerror(errno));
		return -1;
	}
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) {
		snprintf(why, why_len, "socket: %s", strerror(errno));
		free(reply);
		return -1;
	}
	/* _copy_arg checked the length: it fits with its NUL. */
	memcpy(addr.sun_path, _socket_path, strlen(_socket_path) + 1);
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		snprintf(why, why_len, "%s: %s", _socket_path, strerror(errno));
		goto out;
	}
	snprintf(request, sizeof(request),
		 "{\"op\":\"check-job\",\"job_id\":\"%u\",\"timeout\":%d}\n", job_id,
		 _prolog_timeout);
	if (write(fd, request, strlen(request)) != (ssize_t)strlen(request)) {
		snprintf(why, why_len, "%s: write: %s", _socket_path, strerror(errno));
		goto out;
	}
	/* The service answers within its own timeout; allow it a margin, never wait forever. */
	switch (_read_line(fd, reply, MAX_REPLY, _now() + _prolog_timeout + 30, &got)) {
	case _LINE_TIMEOUT:
		snprintf(why, why_len, "no answer from %s within %ds", _socket_path,
			 _prolog_timeout + 30);
		goto out;
	case _LINE_ERROR:
		snprintf(why, why_len, "%s: read: %s", _socket_path, strerror(errno));
		goto out;
	case _LINE_CLOSED:
		snprintf(why, why_len, "%s closed the connection without answering", _socket_path);
		goto out;
	}
	if (!memchr(reply, '\n', got)) {
		snprintf(why, why_len, "%s: reply longer than %d bytes", _socket_path, MAX_REPLY);
		goto out;
	}
	rc = _judge_reply(reply, why, why_len);
out:
	close(fd);
	free(reply);
	return rc;
}

/* A context on this host's munged (munge_socket=, or libmunge's default); NULL with why. */
static munge_ctx_t _munge_context(char *why, size_t why_len)
{
	munge_ctx_t ctx = munge_ctx_create();
	munge_err_t err;

	if (!ctx) {
		snprintf(why, why_len, "munge: cannot create a context: %s", strerror(ENOMEM));
		return NULL;
	}
	if (_munge_socket[0] &&
	    (err = munge_ctx_set(ctx, MUNGE_OPT_SOCKET, _munge_socket)) != EMUNGE_SUCCESS) {
		snprintf(why, why_len, "munge: socket %s: %s", _munge_socket, munge_strerror(err));
		munge_ctx_destroy(ctx);
		return NULL;
	}
	return ctx;
}

static const char *_munge_reason(munge_ctx_t ctx, munge_err_t err)
{
	const char *detail = munge_ctx_strerror(ctx);

	return detail ? detail : munge_strerror(err);
}

/*
 * The head's reply line judged: only a credential that this host's munged decodes (the site's
 * key, within its TTL, never seen before), made by uid 0 (the head's service) for this
 * request_id, is believed; an unsealed line is believed only as a refusal. Returns as
 * _judge_reply, 0 with why for any reply not believed, -1 when munged cannot be asked.
 */
static int _open_reply(const char *line, const char *request_id, char *why, size_t why_len)
{
	char prefix[sizeof(WIRE_REPLY) + 64], error[512], *body = NULL;
	void *payload = NULL;
	int len = 0, prefix_len, rc = 0;
	uid_t uid = (uid_t)-1;
	gid_t gid;
	munge_ctx_t ctx;
	munge_err_t err;

	if (line[0] == '{') {
		_json_string(line, "error", error, sizeof(error));
		snprintf(why, why_len, "the head refused the request: %s",
			 error[0] ? error : "(an unsealed reply without a reason)");
		return 0;
	}
	if (strncmp(line, "MUNGE:", 6)) {
		snprintf(why, why_len, "the head's reply was refused: not a MUNGE credential");
		return 0;
	}
	if (!(ctx = _munge_context(why, why_len)))
		return -1;
	prefix_len = snprintf(prefix, sizeof(prefix), "%s%s\n", WIRE_REPLY, request_id);
	err = munge_decode(line, ctx, &payload, &len, &uid, &gid);
	if (err == EMUNGE_SOCKET) {
		snprintf(why, why_len, "munge: %s", _munge_reason(ctx, err));
		rc = -1;
	} else if (err != EMUNGE_SUCCESS) {
		snprintf(why, why_len, "the head's reply was refused: %s", _munge_reason(ctx, err));
	} else if (uid != 0) {
		snprintf(why, why_len, "the head's reply was refused: sealed by uid %u, not the "
			 "head's service", (unsigned int)uid);
	} else if (len < prefix_len || memcmp(payload, prefix, (size_t)prefix_len)) {
		snprintf(why, why_len, "the head's reply was refused: sealed for another request");
	} else if (!(body = strndup((char *)payload + prefix_len, (size_t)(len - prefix_len)))) {
		snprintf(why, why_len, "the head's reply: %s", strerror(errno));
		rc = -1;
	} else {
		rc = _judge_reply(body, why, why_len);
	}
	free(body);
	free(payload);
	munge_ctx_destroy(ctx);
	return rc;
}

/* A TCP connection to head=, within HEAD_CONNECT_TIMEOUT and before end; -1 with why. */
static int _head_connect(double end, char *why, size_t why_len)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *found, *ai;
	double until = _now() + HEAD_CONNECT_TIMEOUT < end ? _now() + HEAD_CONNECT_TIMEOUT : end;
	socklen_t err_len = sizeof(int);
	int fd = -1, rc, err = ETIMEDOUT;

	if ((rc = getaddrinfo(_head_host, _head_port, &hints, &found))) {
		snprintf(why, why_len, "%s: %s", _head_host,
			 rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
		return -1;
	}
	for (ai = found; ai && fd < 0; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
			    ai->ai_protocol);
		if (fd < 0) {
			err = errno;
			continue;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		if (errno != EINPROGRESS)
			err = errno;
		else if ((rc = _wait_fd(fd, POLLOUT, until)) <= 0)
			err = rc ? errno : ETIMEDOUT;
		else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) == 0 && !err)
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(found);
	_head_refused = fd < 0 && err == ECONNREFUSED;
	if (fd < 0)
		snprintf(why, why_len, "%s", strerror(err));
	return fd;
}

static int _send_all(int fd, const char *text, size_t len, double deadline)
{
	while (len) {
		ssize_t n = send(fd, text, len, MSG_NOSIGNAL);
		int ready;

		if (n > 0) {
			text += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno != EINTR && errno != EAGAIN)
			return -1;
		if ((ready = _wait_fd(fd, POLLOUT, deadline)) <= 0) {
			if (!ready)
				errno = ETIMEDOUT;
			return -1;
		}
	}
	return 0;
}

/*
 * One try of a request to the head: a new credential carrying payload, one line each way.
 * Returns as _open_reply; -1 (why) when the head did not answer (refused, reset, closed
 * without a reply: worth another try); -2 when this host cannot make a credential.
 */
static int _head_try(const char *payload, const char *request_id, double end, char *why,
		     size_t why_len)
{
	munge_ctx_t ctx = _munge_context(why, why_len);
	char *cred = NULL, *line = NULL;
	munge_err_t err;
	size_t got;
	int fd = -1, rc = -1;

	if (!ctx)
		return -2;
	err = munge_encode(&cred, ctx, payload, (int)strlen(payload));
	if (err != EMUNGE_SUCCESS) {
		snprintf(why, why_len, "munge: cannot make a credential: %s",
			 _munge_reason(ctx, err));
		rc = -2;
		goto out;
	}
	if ((fd = _head_connect(end, why, why_len)) < 0)
		goto out;
	if (_send_all(fd, cred, strlen(cred), end) < 0 || _send_all(fd, "\n", 1, end) < 0) {
		snprintf(why, why_len, "send: %s", strerror(errno));
		goto out;
	}
	if (!(line = malloc(MAX_HEAD_LINE))) {
		snprintf(why, why_len, "%s", strerror(errno));
		rc = -2;
		goto out;
	}
	switch (_read_line(fd, line, MAX_HEAD_LINE, end, &got)) {
	case _LINE_TIMEOUT:
		snprintf(why, why_len, "no answer from head %s within %ds", _head_address,
			 _prolog_timeout + 30);
		rc = -2;
		break;
	case _LINE_ERROR:
		snprintf(why, why_len, "read: %s", strerror(errno));
		break;
	case _LINE_CLOSED:
		snprintf(why, why_len, "closed the connection without answering");
		break;
	default:
		if (!memchr(line, '\n', got)) {
			snprintf(why, why_len, "the head's reply was refused: longer than %d bytes",
				 MAX_HEAD_LINE);
			rc = 0;
			break;
		}
		*strchr(line, '\n') = '\0';
		rc = _open_reply(line, request_id, why, why_len);
	}
out:
	if (fd >= 0)
		close(fd);
	free(line);
	free(cred);
	munge_ctx_destroy(ctx);
	return rc;
}

/* A random fraction in [0, 1), for backoff jitter. */
static double _jitter(void)
{
	uint32_t value = 0;

	if (getrandom(&value, sizeof(value), GRND_NONBLOCK) != (ssize_t)sizeof(value))
		return 0.5;
	return value / 4294967296.0;
}

/*
 * check-job over TCP to head= (scratchkeeper/wire.py): a request_id drawn once, the request
 * sealed by this host's munged. A refused, reset or closed connection is tried again with
 * backoff, a new credential and the same request_id (the head answers a repeated id with its
 * first answer) while _prolog_timeout lasts; no answer is awaited past _prolog_timeout + 30 s
 * from the start, the Unix socket's bound. Returns as _check_job_socket.
 */
static int _check_job_head(uint32_t job_id, char *why, size_t why_len)
{
	unsigned char raw[16];
	char request_id[2 * sizeof(raw) + 1], payload[512], last[512];
	double start = _now(), retry_end = start + _prolog_timeout, delay = 0.1, pause;
	double refused_since = -1;
	size_t i;
	int rc;

	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
		snprintf(why, why_len, "getrandom: %s", strerror(errno));
		return -1;
	}
	for (i = 0; i < sizeof(raw); i++)
		snprintf(request_id + 2 * i, 3, "%02x", raw[i]);
	snprintf(payload, sizeof(payload), WIRE_REQUEST "{\"op\":\"check-job\",\"job_id\":\"%u\","
		 "\"timeout\":%d,\"request_id\":\"%s\"}", job_id, _prolog_timeout, request_id);
	for (;;) {
		_head_refused = 0;
		rc = _head_try(payload, request_id, retry_end + 30, why, why_len);
		if (rc != -1)
			return rc < 0 ? -1 : rc;
		/* refused for head_wait in a row: the service is down, as a missing Unix socket */
		refused_since = !_head_refused ? -1 : refused_since < 0 ? _now() : refused_since;
		if (refused_since >= 0 && _now() - refused_since >= _head_wait)
			break;
		if ((pause = retry_end - _now()) <= 0)
			break;
		if (pause > delay * (0.5 + _jitter() / 2))
			pause = delay * (0.5 + _jitter() / 2);
		poll(NULL, 0, (int)(pause * 1000));
		delay = delay * 2 < 2.0 ? delay * 2 : 2.0;
	}
	snprintf(last, sizeof(last), "%s", why);
	snprintf(why, why_len, "head %s did not answer within %.0fs: %s", _head_address,
		 _now() - start, last);
	return -1;
}

/* Whether the job's staged inputs are whole: 1, 0 (why), -1 service unreachable (why). */
static int _check_job(uint32_t job_id, char *why, size_t why_len)
{
	if (_head_host[0])
		return _check_job_head(job_id, why, why_len);
	return _check_job_socket(job_id, why, why_len);
}

static int _run(char *const argv[], int timeout, char *why, size_t why_len);

/* The node's name: slurmd puts SLURMD_NODENAME in the prolog's and the tasks' environment. */
static const char *_node_name(void)
{
	const char *name = getenv("SLURMD_NODENAME");

	return name && *name ? name : "this node";
}

/*
 * The prolog's gate: on a dead scratch mount, run the node health check (it drains the node
 * with scratchkeeper's own reason, which it alone lifts once the mount is back; Slurm's own
 * "Prolog error" drain leaves a node drained already as it is) and refuse the job.
 * Returns 0 when the mount is up.
 */
static int _refuse_on_dead_mount(uint32_t job_id)
{
	char why[256], ran[512] = "";
	char timeout[16];
	char *argv[8];
	int n = 0;

	if (_scratch_state(why, sizeof(why)))
		return 0;
	if (_healthcheck[0]) {
		snprintf(timeout, sizeof(timeout), "%d", _mount_timeout);
		argv[n++] = _healthcheck;
		argv[n++] = "--scratch";
		argv[n++] = _scratch;
		argv[n++] = "--timeout";
		argv[n++] = timeout;
		argv[n] = NULL;
		/* its own scontrol calls are bounded (30 s each), its statfs by --timeout */
		if (_run(argv, _mount_timeout + 75, ran, sizeof(ran)) < 0)
			slurm_error("scratchkeeper: job %u: the node health check failed: %s", job_id,
				    ran);
	}
	slurm_error("scratchkeeper: job %u: scratch mount %s on %s is down (%s): job refused, "
		    "Slurm requeues it%s", job_id, _scratch, _node_name(), why,
		    _healthcheck[0] ? "; the node is drained until the mount is back" : "");
	return -1;
}

int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
	uint32_t job_id = 0;
	char why[1024] = "";
	int rc;

	/* The job script context calls no slurm_spank_init: read the arguments here. */
	if (_parse_args(ac, av) < 0)
		return ESPANK_BAD_ARG;
	if (spank_context() != S_CTX_JOB_SCRIPT)
		return ESPANK_SUCCESS;
	if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS) {
		slurm_error("scratchkeeper: prolog: no job id");
		return ESPANK_ERROR;
	}
	/* With "required" a negative return fails the prolog: Slurm requeues the job (held
	 * unless SchedulerParameters=nohold_on_prolog_fail); with "optional" it is only logged.
	 * Negative, not ESPANK_ERROR: that is 3000 in 22.05, which slurmstepd's "spank prolog"
	 * logs as a failure of the required plugin but still exits 0 for, so the job would run
	 * (seen on the local cluster). */
	if (_refuse_on_dead_mount(job_id) < 0)
		return PROLOG_FAILS;
	rc = _check_job(job_id, why, sizeof(why));
	if (rc == 1) {
		slurm_info("scratchkeeper: job %u: staged inputs whole", job_id);
		return ESPANK_SUCCESS;
	}
	if (rc < 0) {
		/* A daemon outage must not drain nodes: let the job run, say why it was unchecked. */
		slurm_error("scratchkeeper: job %u: recovery service unreachable, inputs not "
			    "checked: %s", job_id, why);
		return ESPANK_SUCCESS;
	}
	/* Negative: with "required" in plugstack.conf the prolog fails (node drained, job
	 * requeued held) unless lost_input=run; with "optional" Slurm logs it and the job runs. */
	slurm_error("scratchkeeper: job %u: staged input not whole: %s", job_id, why);
	return _lost_input_runs ? ESPANK_SUCCESS : PROLOG_FAILS;
}

/* Run argv with a timeout; stdout/stderr to /dev/null (the command logs itself). */
static int _run(char *const argv[], int timeout, char *why, size_t why_len)
{
	double deadline = _now() + timeout;
	int status;
	pid_t pid = fork();

	if (pid < 0) {
		snprintf(why, why_len, "fork: %s", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);

		if (null >= 0) {
			dup2(null, 0);
			dup2(null, 1);
			dup2(null, 2);
		}
		setpgid(0, 0);
		execv(argv[0], argv);
		_exit(127);
	}
	for (;;) {
		pid_t done = waitpid(pid, &status, WNOHANG);

		if (done == pid)
			break;
		if (done < 0 && errno != EINTR) {
			snprintf(why, why_len, "waitpid: %s", strerror(errno));
			return -1;
		}
		if (_now() > deadline) {
			kill(-pid, SIGKILL);
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			snprintf(why, why_len, "%s timed out after %ds", argv[0], timeout);
			return -1;
		}
		usleep(50000);
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	if (WIFEXITED(status))
		snprintf(why, why_len, "%s exited %d", argv[0], WEXITSTATUS(status));
	else
		snprintf(why, why_len, "%s killed by signal %d", argv[0], WTERMSIG(status));
	return -1;
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
	uint32_t job_id = 0;
	char job[32], why[512] = "";
	char *argv[8];
	int n = 0;

	/* The job script context calls no slurm_spank_init: read the arguments here. */
	if (_parse_args(ac, av) < 0)
		return ESPANK_BAD_ARG;
	if (spank_context() != S_CTX_JOB_SCRIPT || !_epilog_enabled)
		return ESPANK_SUCCESS;
	if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS) {
		slurm_error("scratchkeeper: epilog: no job id");
		return ESPANK_ERROR;
	}
	snprintf(job, sizeof(job), "%u", job_id);
	argv[n++] = _command;
	if (_config[0]) {
		argv[n++] = "--config";
		argv[n++] = _config;
	}
	argv[n++] = "replicas";
	argv[n++] = "job-ended";
	argv[n++] = job;
	argv[n] = NULL;
	if (_run(argv, _epilog_timeout, why, sizeof(why)) < 0) {
		/* logged only: a failed epilog would drain the node under "required" */
		slurm_error("scratchkeeper: job %u: could not tell the replication daemon the job "
			    "ended: %s", job_id, why);
		return ESPANK_SUCCESS;
	}
	slurm_info("scratchkeeper: job %u: replication daemon told the job ended", job_id);
	return ESPANK_SUCCESS;
}

/* One line on the job's stderr, "scratchkeeper: TIME: ..." (UTC, to the second). */
static void _tell_job(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void _tell_job(const char *fmt, ...)
{
	char stamp[32], text[1024];
	time_t now = time(NULL);
	struct tm tm;
	va_list args;

	gmtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
	va_start(args, fmt);
	vsnprintf(text, sizeof(text), fmt, args);
	va_end(args);
	dprintf(STDERR_FILENO, "scratchkeeper: %s: %s\n", stamp, text);
}

/*
 * The batch script's watcher: a child of the task (so it is the job's, as the user, killed
 * with it) that keeps only the job's stderr and checks the mount every _watch_interval
 * seconds, printing one line when it goes down and one when it is back. It ends with the
 * task (PR_SET_PDEATHSIG): the batch shell's exit ends it, and Slurm kills what is left.
 */
static void _start_watcher(int up)
{
	pid_t parent = getpid();
	char why[256];
	int fd;

	if (fork() != 0)
		return;  /* the task goes on to exec the job (a failed fork: no watcher) */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
		_exit(0);
	fd = open("/dev/null", O_RDWR);
	if (fd >= 0) {
		dup2(fd, STDIN_FILENO);
		dup2(fd, STDOUT_FILENO);
	}
	/* no other descriptor of the task's (pipes a reader waits to see closed) */
	for (fd = STDERR_FILENO + 1; fd < 1024; fd++)
		close(fd);
	for (;;) {
		int now;

		sleep((unsigned int)_watch_interval);
		now = _scratch_state(why, sizeof(why));
		if (up && !now)
			_tell_job("the scratch mount %s on %s went down (%s): files under it cannot "
				  "be read or written until it is mounted again", _scratch,
				  _node_name(), why);
		else if (!up && now)
			_tell_job("the scratch mount %s on %s is back: files opened before it went "
				  "down stay unusable, open them again", _scratch, _node_name());
		up = now;
	}
}

/*
 * In each step's first task on a node, as the user, just before the job's program: a dead
 * mount is said on the job's stderr (its output file), since the program itself will only
 * see ENOTCONN; the task runs anyway (it may not use the scratch file system). The batch
 * script gets the watcher too.
 */
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	uint32_t step = 0;
	int task = 0, up;
	char why[256];

	(void)ac;
	(void)av;
	/* one line per step and node, not one per task */
	if (spank_context() != S_CTX_REMOTE ||
	    spank_get_item(sp, S_TASK_ID, &task) != ESPANK_SUCCESS || task != 0)
		return ESPANK_SUCCESS;
	up = _scratch_state(why, sizeof(why));
	if (!up)
		_tell_job("the scratch mount %s on %s is down (%s): files under it cannot be read or "
			  "written until it is mounted again", _scratch, _node_name(), why);
	if (_watch_interval > 0 && spank_get_item(sp, S_JOB_STEPID, &step) == ESPANK_SUCCESS &&
	    step == SLURM_BATCH_SCRIPT)
		_start_watcher(up);
	return ESPANK_SUCCESS;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	int i;

	(void)sp;
	(void)ac;
	(void)av;
	for (i = 0; i < _stage_in_count; i++)
		free(_stage_in[i]);
	for (i = 0; i < _stage_out_count; i++)
		free(_stage_out[i]);
	_stage_in_count = _stage_out_count = 0;
	return ESPANK_SUCCESS;
}
