// Creates a nested user namespace (and with it a full capability set over new namespaces) —
// the springboard of most unprivileged-userns kernel exploits — with unshare(2) for each
// namespace type, and with the util-linux `unshare` tool.
// Blocked by: seccomp refuses unshare (EPERM).
// space-attack: sandbox=shared
#include <sched.h>

#include "../attack.h"

int main(void) {
  struct {
    int flag;
    const char* name;
  } types[] = {{CLONE_NEWUSER, "CLONE_NEWUSER"},
               {CLONE_NEWNS, "CLONE_NEWNS"},
               {CLONE_NEWNET, "CLONE_NEWNET"},
               {CLONE_NEWPID, "CLONE_NEWPID"},
               {CLONE_NEWUTS, "CLONE_NEWUTS"},
               {CLONE_NEWIPC, "CLONE_NEWIPC"},
               {CLONE_NEWCGROUP, "CLONE_NEWCGROUP"},
               {CLONE_NEWTIME, "CLONE_NEWTIME"},
               {CLONE_NEWUSER | CLONE_NEWNS, "CLONE_NEWUSER|CLONE_NEWNS"}};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; ++i) {
    char what[64];
    snprintf(what, sizeof what, "unshare(%s)", types[i].name);
    refused(what, unshare(types[i].flag), EPERM, 0);
  }
  int status = system("unshare -Ur true 2>/dev/null");
  if (status == 0)
    escaped("`unshare -Ur true` succeeded");
  else
    note("`unshare -Ur true` failed (status %d)", status);
  finish();
}
