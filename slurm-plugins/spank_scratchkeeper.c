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
 *   slurm_spank_job_prolog  asks recoveryd (Unix socket) "check-job" and waits, with a
 *                           timeout, until the job's staged inputs are whole;
 *   slurm_spank_job_epilog  runs `scratchkeeper replicas job-ended JOBID` for replicad.
 *
 * plugstack.conf arguments (all optional):
 *   socket=PATH         recoveryd socket     (default /run/scratchkeeper/recoveryd.sock)
 *   prolog_timeout=S    longest wait for recovery in the prolog (default 600)
 *   scratchkeeper=PATH  the scratchkeeper command (default /usr/local/bin/scratchkeeper)
 *   config=PATH         site config passed as --config (default: scratchkeeper's own default)
 *   epilog_timeout=S    longest run of the epilog command (default 30)
 *   epilog=no           do not notify the replication daemon
 */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
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

#include <slurm/spank.h>

SPANK_PLUGIN(scratchkeeper, 1);

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
	 * requeued held); with "optional" Slurm logs it and the job runs. */
	slurm_error("scratchkeeper: job %u: staged input not whole: %s", job_id, why);
	return ESPANK_ERROR;
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
		slurm_error("scratchkeeper: job %u: could not tell the replication daemon the job "
			    "ended: %s", job_id, why);
		return ESPANK_ERROR;
	}
	slurm_info("scratchkeeper: job %u: replication daemon told the job ended", job_id);
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
