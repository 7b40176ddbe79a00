/*
 * delayfs: a read-only FUSE passthrough that adds a fixed delay to every
 * read, to reproduce network storage (GPFS, Lustre, NFS, EBS: milliseconds
 * per read, whatever its size) on one machine. Reads are served by
 * FUSE's multi-threaded loop, so requests in flight overlap as they would on
 * a parallel filesystem: the delay is latency, not a bandwidth cap.
 *
 *   cc -O2 -o delayfs bench/delayfs.c $(pkg-config --cflags --libs fuse3)
 *   delayfs -o source=/data,delay_us=2000 /mnt/slow     (root, or user_allow_other)
 *   fusermount3 -u /mnt/slow
 *
 * Kept small so that its own cost stays out of the measurement: a pread of
 * the source file per read, nothing cached, no metadata delay.
 */
#define FUSE_USE_VERSION 31
#define _GNU_SOURCE

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static struct options {
  const char* source;
  unsigned delay_us;
} opts;

#define OPTION(t, p) {t, offsetof(struct options, p), 1}
static const struct fuse_opt option_spec[] = {OPTION("source=%s", source),
                                              OPTION("delay_us=%u", delay_us), FUSE_OPT_END};

static void full_path(char out[PATH_MAX], const char* path) {
  snprintf(out, PATH_MAX, "%s%s", opts.source, path);
}

static int d_getattr(const char* path, struct stat* st, struct fuse_file_info* fi) {
  (void)fi;
  char p[PATH_MAX];
  full_path(p, path);
  return lstat(p, st) == 0 ? 0 : -errno;
}

static int d_readdir(const char* path, void* buf, fuse_fill_dir_t fill, off_t off,
                     struct fuse_file_info* fi, enum fuse_readdir_flags flags) {
  (void)off;
  (void)fi;
  (void)flags;
  char p[PATH_MAX];
  full_path(p, path);
  DIR* d = opendir(p);
  if (d == NULL) return -errno;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    struct stat st = {0};
    st.st_ino = e->d_ino;
    st.st_mode = (mode_t)e->d_type << 12;
    if (fill(buf, e->d_name, &st, 0, 0)) break;
  }
  closedir(d);
  return 0;
}

static int d_open(const char* path, struct fuse_file_info* fi) {
  if ((fi->flags & O_ACCMODE) != O_RDONLY) return -EROFS;
  char p[PATH_MAX];
  full_path(p, path);
  int fd = open(p, O_RDONLY);
  if (fd < 0) return -errno;
  fi->fh = (uint64_t)fd;
  return 0;
}

static int d_read(const char* path, char* buf, size_t size, off_t off, struct fuse_file_info* fi) {
  (void)path;
  if (opts.delay_us > 0) {
    struct timespec t = {opts.delay_us / 1000000, (long)(opts.delay_us % 1000000) * 1000};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
  }
  ssize_t n = pread((int)fi->fh, buf, size, off);
  return n < 0 ? -errno : (int)n;
}

static int d_release(const char* path, struct fuse_file_info* fi) {
  (void)path;
  close((int)fi->fh);
  return 0;
}

static int d_statfs(const char* path, struct statvfs* st) {
  char p[PATH_MAX];
  full_path(p, path);
  return statvfs(p, st) == 0 ? 0 : -errno;
}

static void* d_init(struct fuse_conn_info* conn, struct fuse_config* cfg) {
  (void)conn;
  cfg->kernel_cache = 0;  /* every open starts cold */
  cfg->use_ino = 1;
  cfg->entry_timeout = cfg->attr_timeout = 60;
  return NULL;
}

static const struct fuse_operations ops = {
    .init = d_init,
    .getattr = d_getattr,
    .readdir = d_readdir,
    .open = d_open,
    .read = d_read,
    .release = d_release,
    .statfs = d_statfs,
};

int main(int argc, char* argv[]) {
  struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
  if (fuse_opt_parse(&args, &opts, option_spec, NULL) == -1) return 2;
  if (opts.source == NULL) {
    fprintf(stderr, "delayfs: error: -o source=DIR is required\n");
    return 2;
  }
  char* real = realpath(opts.source, NULL);
  if (real == NULL) {
    fprintf(stderr, "delayfs: error: source %s: %s\n", opts.source, strerror(errno));
    return 2;
  }
  opts.source = real;
  int rc = fuse_main(args.argc, args.argv, &ops, NULL);
  fuse_opt_free_args(&args);
  return rc;
}
