/* The init of the V4L2 test machine (tools/vivid_vm/run.py): a static program, the only one in its
 * initramfs. It loads the kernel modules of /modules (file names sorted: the load order; a NAME.args
 * file beside a module holds its parameters), mounts the host's root read-only over 9p (tag
 * "hostroot") with the machine's own /proc, /sys, /dev and /tmp, and the writable share "out" at
 * /tmp/dvpipe-vm; then runs /tmp/dvpipe-vm/run.sh with the host's /bin/sh, writes its exit status to
 * /tmp/dvpipe-vm/rc and powers the machine off. Every step it cannot take is printed on the console. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static void say(const char *what, const char *name) {
    fprintf(stderr, "vivid-vm init: %s %s: %s\n", what, name, strerror(errno));
}

static int by_name(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

static void load_modules(void) {
    struct dirent **names;
    int n = scandir("/modules", &names, NULL, by_name);
    for (int i = 0; i < n; i++) {
        const char *name = names[i]->d_name;
        size_t len = strlen(name);
        if (len < 4 || strcmp(name + len - 3, ".ko") != 0)
            continue;
        char path[512], args_path[512], args[1024] = "";
        snprintf(path, sizeof path, "/modules/%s", name);
        snprintf(args_path, sizeof args_path, "/modules/%.*s.args", (int)(len - 3), name);
        int a = open(args_path, O_RDONLY);
        if (a >= 0) {
            ssize_t got = read(a, args, sizeof args - 1);
            args[got > 0 ? got : 0] = '\0';
            close(a);
        }
        int fd = open(path, O_RDONLY);
        if (fd < 0 || syscall(SYS_finit_module, fd, args, 0) != 0)
            say("cannot load", name);
        if (fd >= 0)
            close(fd);
    }
}

static void must_mount(const char *src, const char *dst, const char *type, unsigned long flags, const char *data) {
    if (mount(src, dst, type, flags, data) != 0)
        say("cannot mount", dst);
}

int main(void) {
    mount("devtmpfs", "/dev", "devtmpfs", 0, NULL);
    load_modules();
    const char *p9 = "trans=virtio,version=9p2000.L,cache=loose,msize=512000";
    must_mount("hostroot", "/newroot", "9p", MS_RDONLY, p9);
    must_mount("proc", "/newroot/proc", "proc", 0, NULL);
    must_mount("sysfs", "/newroot/sys", "sysfs", 0, NULL);
    must_mount("devtmpfs", "/newroot/dev", "devtmpfs", 0, NULL);
    must_mount("tmpfs", "/newroot/tmp", "tmpfs", 0, "mode=1777");
    mkdir("/newroot/tmp/dvpipe-vm", 0755);
    must_mount("out", "/newroot/tmp/dvpipe-vm", "9p", 0, "trans=virtio,version=9p2000.L,msize=512000");
    if (chroot("/newroot") != 0 || chdir("/") != 0)
        say("cannot enter", "/newroot");
    pid_t pid = fork();
    if (pid == 0) {
        setenv("HOME", "/tmp", 1);
        setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", 1);
        execl("/bin/sh", "sh", "/tmp/dvpipe-vm/run.sh", (char *)NULL);
        say("cannot run", "/tmp/dvpipe-vm/run.sh");
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    FILE *rc = fopen("/tmp/dvpipe-vm/rc", "w");
    if (rc) {
        fprintf(rc, "%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        fclose(rc);
    }
    sync();
    reboot(RB_POWER_OFF);
    return 0;
}
