/*
 * A stand-in slurmstepd for tests/plugins/test_spank_mount_gate.py: compiled together with
 * slurm-plugins/spank_scratchkeeper.c, it gives the plugin the few SPANK calls it makes and
 * calls one of its hooks as Slurm would, so the scratch-mount gate (job prolog) and the task's
 * lines on the job's stderr are tested on a real dead FUSE mount without a cluster.
 *
 *   spank_harness prolog ARG...            slurm_spank_job_prolog (job script context)
 *   spank_harness task SECONDS ARG...      slurm_spank_init + slurm_spank_task_init (remote
 *                                          context), then sleeps SECONDS as the job would run
 *   spank_harness epilog ARG...            slurm_spank_job_epilog (job script context)
 *
 * Environment: HARNESS_JOB_ID (default 42), HARNESS_STEP ("batch" or a number; default batch).
 * slurm_error/slurm_info lines go to stdout as "error: ..." / "info: ..."; exit status: the
 * hook's return code (0 success, 1 error).
 */

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

static spank_context_t _context = S_CTX_JOB_SCRIPT;

void slurm_error(const char *format, ...)
{
	va_list args;

	va_start(args, format);
	printf("error: ");
	vprintf(format, args);
	printf("\n");
	fflush(stdout);
	va_end(args);
}

void slurm_info(const char *format, ...)
{
	va_list args;

	va_start(args, format);
	printf("info: ");
	vprintf(format, args);
	printf("\n");
	fflush(stdout);
	va_end(args);
}

spank_context_t spank_context(void)
{
	return _context;
}

spank_err_t spank_get_item(spank_t spank, spank_item_t item, ...)
{
	va_list args;
	const char *step = getenv("HARNESS_STEP");
	const char *job = getenv("HARNESS_JOB_ID");

	(void)spank;
	va_start(args, item);
	switch (item) {
	case S_JOB_ID:
		*va_arg(args, uint32_t *) = job ? (uint32_t)strtoul(job, NULL, 10) : 42;
		break;
	case S_JOB_STEPID:
		*va_arg(args, uint32_t *) = (!step || !strcmp(step, "batch")) ?
			SLURM_BATCH_SCRIPT : (uint32_t)strtoul(step, NULL, 10);
		break;
	case S_TASK_ID:
		*va_arg(args, int *) = 0;
		break;
	default:
		va_end(args);
		return ESPANK_BAD_ARG;
	}
	va_end(args);
	return ESPANK_SUCCESS;
}

spank_err_t spank_option_register(spank_t spank, struct spank_option *opt)
{
	(void)spank;
	(void)opt;
	return ESPANK_SUCCESS;
}

spank_err_t spank_job_control_setenv(spank_t spank, const char *var, const char *val,
				     int overwrite)
{
	(void)spank;
	(void)var;
	(void)val;
	(void)overwrite;
	return ESPANK_SUCCESS;
}

const char *spank_strerror(spank_err_t err)
{
	return err == ESPANK_SUCCESS ? "success" : "error";
}

int main(int argc, char **argv)
{
	int rc;

	if (argc >= 2 && !strcmp(argv[1], "prolog")) {
		_context = S_CTX_JOB_SCRIPT;
		rc = slurm_spank_job_prolog(NULL, argc - 2, argv + 2);
		/* as slurmstepd's "spank prolog" decides for a required plugin: only a negative
		 * return fails the prolog (a positive ESPANK_* code is logged, the job runs) */
		return rc < 0 ? 1 : 0;
	}
	if (argc >= 2 && !strcmp(argv[1], "epilog")) {
		_context = S_CTX_JOB_SCRIPT;
		rc = slurm_spank_job_epilog(NULL, argc - 2, argv + 2);
		return rc == ESPANK_SUCCESS ? 0 : 1;
	}
	if (argc >= 3 && !strcmp(argv[1], "task")) {
		_context = S_CTX_REMOTE;
		if (slurm_spank_init(NULL, argc - 3, argv + 3) != ESPANK_SUCCESS)
			return 1;
		rc = slurm_spank_task_init(NULL, argc - 3, argv + 3);
		/* the job's program: the watcher, if any, is this process's child */
		sleep((unsigned int)atoi(argv[2]));
		return rc == ESPANK_SUCCESS ? 0 : 1;
	}
	fprintf(stderr, "usage: spank_harness prolog|epilog ARG... | task SECONDS ARG...\n");
	return 2;
}
