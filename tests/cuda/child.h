/* child.h — shared by the emulator tests: run a function in a forked child
 * and collect what it wrote to stderr. */
#ifndef GC_TEST_CHILD_H
#define GC_TEST_CHILD_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>

/* Runs f in a child (stderr captured into *err, which is cleared first);
 * returns its exit status, or minus the signal number that killed it. */
static inline int in_child(const std::function<void()> &f, std::string *err)
{
    int fd[2];
    if (pipe(fd) != 0)
        abort();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        f();
        _exit(0);
    }
    close(fd[1]);
    char buf[512];
    ssize_t k;
    err->clear();
    while ((k = read(fd[0], buf, sizeof buf)) > 0)
        err->append(buf, (size_t)k);
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st) ? -WTERMSIG(st) : WEXITSTATUS(st);
}

#endif
