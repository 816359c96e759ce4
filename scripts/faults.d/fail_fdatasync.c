/* An LD_PRELOAD shim for scripts/faults: fdatasync(2) fails with EIO while the file named by
 * $FAULTS_FDATASYNC_TRIGGER exists, and is the real call otherwise. It stands in for a disk that
 * reports a writeback error, which cannot be had on demand without device-mapper's dm-error. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

int fdatasync(int fd) {
    const char *trigger = getenv("FAULTS_FDATASYNC_TRIGGER");
    if (trigger != NULL && access(trigger, F_OK) == 0) {
        errno = EIO;
        return -1;
    }
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return real(fd);
}
