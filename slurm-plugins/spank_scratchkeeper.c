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
 *                           reason; then asks recoveryd (Unix socket) "check-job" and waits,
 *                           with a timeout, until the job's staged inputs are whole;
 *   slurm_spank_job_epilog  runs `scratchkeeper replicas job-ended JOBID` for replicad.
 * In the job's tasks (remote context, as the user, stderr the job's output):
 *   slurm_spank_task_init   prints one line to the job's stderr when the scratch mount is down,
 *                           and for the batch script leaves a watcher that prints one line when
 *                           the mount goes down while the job runs and one when it is back.
 *
 * plugstack.conf arguments (all optional):
 *   socket=PATH         recoveryd socket     (default /run/scratchkeeper/recoveryd.sock)
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
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/statvfs.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

SPANK_PLUGIN(scratchkeeper, 1);

/* What a job prolog returns to fail (see slurm_spank_job_prolog) */
#define PROLOG_FAILS (-1)
#define MAX_REQUESTS 64
#define MAX_VALUE 4096
#define MAX_REPLY 65536
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
static int _epilog_timeout = 30;
static int _epilog_enabled = 1;
static char _scratch[1024] = "/scratch";
static char _healthcheck[1024] = "";
static int _mount_timeout = 10;
static int _watch_interval = 5;
static int _lost_input_runs = 0;

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

static int _parse_args(int ac, char **av)
{
	int i;

	for (i = 0; i < ac; i++) {
		const char *arg = av[i];

		if (!strncmp(arg, "socket=", 7)) {
			if (_copy_arg(_socket_path, sizeof(_socket_path), arg + 7, "socket") < 0)
				return -1;
		} else if (!strncmp(arg, "scratchkeeper=", 14)) {
			if (_copy_arg(_command, sizeof(_command), arg + 14, "scratchkeeper") < 0)
				return -1;
		} else if (!strncmp(arg, "config=", 7)) {
			if (_copy_arg(_config, sizeof(_config), arg + 7, "config") < 0)
				return -1;
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

/*
 * Ask recoveryd whether the job's staged inputs are whole, waiting up to _prolog_timeout.
 * Returns 1 whole, 0 not whole (reason in why), -1 service unreachable (errno-style in why).
 */
static int _check_job(uint32_t job_id, char *why, size_t why_len)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	char request[256], reply[MAX_REPLY];
	size_t got = 0;
	double deadline;
	int fd, rc = -1;

	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) {
		snprintf(why, why_len, "socket: %s", strerror(errno));
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
	deadline = _now() + _prolog_timeout + 30;
	while (got + 1 < sizeof(reply) && !memchr(reply, '\n', got)) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int left_ms = (int)((deadline - _now()) * 1000);
		ssize_t n;

		if (left_ms <= 0) {
			snprintf(why, why_len, "no answer from %s within %ds", _socket_path,
				 _prolog_timeout + 30);
			goto out;
		}
		if (poll(&pfd, 1, left_ms) < 0) {
			if (errno == EINTR)
				continue;
			snprintf(why, why_len, "poll: %s", strerror(errno));
			goto out;
		}
		n = read(fd, reply + got, sizeof(reply) - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			snprintf(why, why_len, "%s closed the connection without answering",
				 _socket_path);
			goto out;
		}
		got += (size_t)n;
		reply[got] = '\0';
	}
	reply[got] = '\0';
	if (!_json_true(reply, "ok")) {
		char error[512];

		_json_string(reply, "error", error, sizeof(error));
		snprintf(why, why_len, "recovery service refused: %s", error);
		rc = 0;
		goto out;
	}
	if (_json_true(reply, "whole")) {
		rc = 1;
	} else {
		_json_string(reply, "reason", why, why_len);
		rc = 0;
	}
out:
	close(fd);
	return rc;
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
