/* The negative control's shim: with LD_PRELOAD, every way a process asks for its writes
 * to be made durable returns success and does nothing. The power-cut harness must then
 * report lost acked rows; if it did not, a green run of it would mean nothing. */
#define _GNU_SOURCE
#include <stddef.h>
#include <sys/types.h>

int fsync(int fd) { (void)fd; return 0; }
int fdatasync(int fd) { (void)fd; return 0; }
int syncfs(int fd) { (void)fd; return 0; }
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
