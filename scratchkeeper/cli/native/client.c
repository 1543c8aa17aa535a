/* The scratchkeeper command's client: hands `plan`, `submit` and `status` to the user's
 * command server (scratchkeeper/cli/_server.py), which has the Python modules imported already,
 * and runs everything else, or anything the server cannot take, as the Python command itself.
 *
 * Built by the runtime install (scripts/localcluster/runtime.py) with the release's paths:
 *   cc -O2 -DSK_FALLBACK='"RELEASE/bin/scratchkeeper"' -DSK_PYTHON='"RELEASE/bin/python"'
 * SK_FALLBACK is the Python console script; SK_PYTHON runs the server.
 *
 * The client never decides anything the command would: on any doubt (another subcommand, no
 * server, a refusal, a descriptor it cannot pass, a path too long) it execs SK_FALLBACK with
 * the same arguments, so the outcome is the command's own. SCRATCHKEEPER_COMMAND_SERVER=off
 * turns the server off.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SK_FALLBACK
#error "build with -DSK_FALLBACK='\"/path/to/the/python/console/script\"'"
#endif
#ifndef SK_PYTHON
#error "build with -DSK_PYTHON='\"/path/to/python\"'"
#endif

extern char **environ;

static char **g_argv;
static volatile pid_t g_child = 0;
/* a signal received before the child's pid was known: forwarded once it is */
static volatile sig_atomic_t g_pending = 0;

/* End as a process killed by `signum` (what the Python command would have done): the shell
 * sees 128+signum, a parent's waitpid sees WIFSIGNALED. */
static void die_by(int signum) {
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    sigaction(signum, &dfl, NULL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, signum);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    raise(signum);
    _exit(128 + signum);  /* a signal whose default is not to end a process */
}

static void fallback(void) {
    if (g_pending)
        die_by(g_pending);  /* the user's signal came before anything ran */
    g_argv[0] = (char *)"scratchkeeper";
    execv(SK_FALLBACK, g_argv);
    fprintf(stderr, "scratchkeeper: cannot run %s: %s\n", SK_FALLBACK, strerror(errno));
    _exit(127);
}

/* The subcommand argv names, as scratchkeeper.cli.command_word finds it; NULL when unsure. */
static const char *command_word(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *t = argv[i];
        if (strcmp(t, "--") == 0)
            return i + 1 < argc ? argv[i + 1] : NULL;
        if (t[0] != '-' || strcmp(t, "-") == 0)
            return t;
        if (t[1] == '-') {
            size_t n = strcspn(t, "=");
            if (n > 2 && strncmp("--help", t, n) == 0 && n <= 6)
                return NULL;
            if (t[n] != '=' && n > 2 && n <= 8 && strncmp("--config", t, n) == 0)
                i++;
            continue;
        }
        for (const char *f = t + 1; *f; f++) {
            if (*f == 'c') {
                if (f[1] == '\0')
                    i++;
                break;
            }
            if (*f != 'v')
                return NULL;
        }
    }
    return NULL;
}

/* A growing buffer for the request's JSON. */
struct buf { char *data; size_t len, cap; };

static int put(struct buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *data = realloc(b->data, cap);
        if (!data)
            return -1;
        b->data = data;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    return 0;
}

static int puts_(struct buf *b, const char *s) { return put(b, s, strlen(s)); }

static int put_string(struct buf *b, const char *s) {
    if (put(b, "\"", 1))
        return -1;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            if (put(b, esc, 2))
                return -1;
        } else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            if (puts_(b, esc))
                return -1;
        } else if (put(b, (const char *)p, 1)) {
            return -1;
        }
    }
    return put(b, "\"", 1);
}

/* The signals the client forwards; those ignored when it started stay ignored, in it and in
 * the served command (as a background job of a shell script ignores SIGINT). */
static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
#define N_FORWARDED (sizeof forwarded / sizeof *forwarded)

static int ignored(int signum) {
    struct sigaction now;
    return sigaction(signum, NULL, &now) == 0 && now.sa_handler == SIG_IGN;
}

static int build_request(struct buf *b, int argc, char **argv) {
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd))
        return -1;
    mode_t mask = umask(0);
    umask(mask);
    gid_t groups[256];
    int ngroups = getgroups(256, groups);
    if (ngroups < 0)
        return -1;
    char number[32];
    if (puts_(b, "{\"argv\":["))
        return -1;
    for (int i = 1; i < argc; i++)
        if ((i > 1 && puts_(b, ",")) || put_string(b, argv[i]))
            return -1;
    if (puts_(b, "],\"cwd\":") || put_string(b, cwd) || puts_(b, ",\"env\":{"))
        return -1;
    int first = 1;
    for (char **e = environ; *e; e++) {
        char *eq = strchr(*e, '=');
        if (!eq)
            continue;
        char *name = strndup(*e, (size_t)(eq - *e));
        if (!name)
            return -1;
        int bad = (!first && puts_(b, ",")) || put_string(b, name) || puts_(b, ":")
                  || put_string(b, eq + 1);
        free(name);
        if (bad)
            return -1;
        first = 0;
    }
    snprintf(number, sizeof number, "%u", (unsigned)mask);
    if (puts_(b, "},\"umask\":") || puts_(b, number) || puts_(b, ",\"groups\":["))
        return -1;
    for (int i = 0; i < ngroups; i++) {
        snprintf(number, sizeof number, "%s%u", i ? "," : "", (unsigned)groups[i]);
        if (puts_(b, number))
            return -1;
    }
    if (puts_(b, "],\"ignored\":["))
        return -1;
    int any = 0;
    for (size_t i = 0; i < N_FORWARDED; i++) {
        if (!ignored(forwarded[i]))
            continue;
        snprintf(number, sizeof number, "%s%d", any ? "," : "", forwarded[i]);
        if (puts_(b, number))
            return -1;
        any = 1;
    }
    return puts_(b, "]}");
}

/* The socket's directory: the user's own, closed to others (made so when missing). */
static int socket_path(char *path, size_t size) {
    const char *runtime = getenv("XDG_RUNTIME_DIR");
    char dir[256];
    int n;
    if (runtime && runtime[0] == '/')
        n = snprintf(dir, sizeof dir, "%s/scratchkeeper", runtime);
    else
        n = snprintf(dir, sizeof dir, "/tmp/scratchkeeper-%u", (unsigned)getuid());
    if (n < 0 || (size_t)n >= sizeof dir)
        return -1;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return -1;
    struct stat st;
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()
        || (st.st_mode & 077))
        return -1;
    /* one server per release: its name is a hash of the release's command */
    uint64_t hash = 1469598103934665603ULL;
    for (const char *p = SK_FALLBACK; *p; p++)
        hash = (hash ^ (unsigned char)*p) * 1099511628211ULL;
    n = snprintf(path, size, "%s/cmd-%016llx.sock", dir, (unsigned long long)hash);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

static void start_server(const char *path) {
    pid_t pid = fork();
    if (pid < 0)
        return;
    if (pid == 0) {
        if (setsid() < 0 || fork() != 0)
            _exit(0);
        /* the server must not hold the directory it was started in (a scratch folder, a
         * file system to unmount); each command runs in its own client's directory */
        if (chdir("/") != 0)
            _exit(1);
        int null = open("/dev/null", O_RDWR);
        if (null < 0)
            _exit(1);
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
        /* -P: not the working directory on sys.path */
        char *args[] = {(char *)SK_PYTHON, (char *)"-P", (char *)"-m",
                        (char *)"scratchkeeper.cli._server", (char *)"--socket", (char *)path,
                        NULL};
        execv(SK_PYTHON, args);
        _exit(127);
    }
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
}

static int read_full(int fd, void *into, size_t n) {
    char *p = into;
    while (n) {
        ssize_t got = read(fd, p, n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

/* A server that is busy closes the connection: EPIPE, then the Python command (MSG_NOSIGNAL:
 * not a SIGPIPE that would end the command before it ran). */
static int send_full(int fd, const void *from, size_t n) {
    const char *p = from;
    while (n) {
        ssize_t put_ = send(fd, p, n, MSG_NOSIGNAL);
        if (put_ < 0 && errno == EINTR)
            continue;
        if (put_ <= 0)
            return -1;
        p += put_;
        n -= (size_t)put_;
    }
    return 0;
}

static void forward(int signum) {
    if (g_child > 0)
        kill(g_child, signum);
    else
        g_pending = signum;
}

int main(int argc, char **argv) {
    g_argv = argv;
    const char *off = getenv("SCRATCHKEEPER_COMMAND_SERVER");
    const char *word = command_word(argc, argv);
    if ((off && (strcmp(off, "off") == 0 || strcmp(off, "0") == 0)) || !word
        || (strcmp(word, "plan") && strcmp(word, "submit") && strcmp(word, "status")))
        fallback();

    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    if (socket_path(path, sizeof path) != 0)
        fallback();
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock < 0)
        fallback();
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, path, strlen(path) + 1);
    if (connect(sock, (struct sockaddr *)&addr, sizeof addr) != 0) {
        close(sock);
        start_server(path);  /* for the next command; this one runs now */
        fallback();
    }
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != getuid())
        fallback();

    struct buf body = {0};
    if (build_request(&body, argc, argv) != 0)
        fallback();

    /* the signals a user sends the command go to the child running it (from here on: the
     * server may start it as soon as the request is sent) */
    struct sigaction action = {.sa_handler = forward};
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < N_FORWARDED; i++)
        if (!ignored(forwarded[i]))
            sigaction(forwarded[i], &action, NULL);
    char header[8] = {'S', 'K', 'C', '1'};
    uint32_t length = (uint32_t)body.len;
    header[4] = (char)(length >> 24);
    header[5] = (char)(length >> 16);
    header[6] = (char)(length >> 8);
    header[7] = (char)length;
    int fds[3] = {0, 1, 2};
    char control[CMSG_SPACE(sizeof fds)];
    memset(control, 0, sizeof control);
    struct iovec iov = {.iov_base = header, .iov_len = sizeof header};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                         .msg_controllen = sizeof control};
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(cmsg), fds, sizeof fds);
    ssize_t sent;
    do
        sent = sendmsg(sock, &msg, MSG_NOSIGNAL);
    while (sent < 0 && errno == EINTR);
    if (sent != (ssize_t)sizeof header || send_full(sock, body.data, body.len) != 0)
        fallback();
    free(body.data);

    unsigned char answer[5];
    if (read_full(sock, answer, 1) != 0 || answer[0] != 'P')
        fallback();  /* refused, stale, busy, or killed before it started: nothing has run */
    if (read_full(sock, answer + 1, 4) != 0) {
        fprintf(stderr, "scratchkeeper: the command server's child ended before it started\n");
        return 255;
    }
    g_child = (pid_t)((uint32_t)answer[1] << 24 | (uint32_t)answer[2] << 16
                      | (uint32_t)answer[3] << 8 | answer[4]);
    if (g_pending)
        kill(g_child, g_pending);
    unsigned char end[2];
    if (read_full(sock, end, 2) != 0 || (end[0] != 'X' && end[0] != 'K')) {
        fprintf(stderr, "scratchkeeper: the command ended without an exit code (killed?)\n");
        return 255;
    }
    if (end[0] == 'K')  /* the child was killed by this signal: so is the command */
        die_by(end[1]);
    return end[1];
}
