/* The negative controls' shim: with LD_PRELOAD, the ways a process asks for its writes
 * to be made durable return success and do nothing. Built as is, every one of them
 * (fsync, fdatasync, syncfs, sync_file_range, msync, sync); with -DONLY_SYNCFS, syncfs
 * alone (redb's fsyncs still work: only the warehouse files are never made durable).
 * The power-cut harness must then report lost acked rows; if it did not, a green run of
 * it would mean nothing. */
#define _GNU_SOURCE
#include <stddef.h>
#include <sys/types.h>

int syncfs(int fd) { (void)fd; return 0; }

#ifndef ONLY_SYNCFS
int fsync(int fd) { (void)fd; return 0; }
int fdatasync(int fd) { (void)fd; return 0; }
void sync(void) {}
int sync_file_range(int fd, off_t offset, off_t nbytes, unsigned int flags)
{
    (void)fd; (void)offset; (void)nbytes; (void)flags;
    return 0;
}
int msync(void *addr, size_t length, int flags)
{
    (void)addr; (void)length; (void)flags;
    return 0;
}
#endif
