// Uses the kernel keyring, which is not namespaced: add a key, read the session and user
// keyrings (other users' secrets, Kerberos tickets, dm-crypt keys), request_key.
// Blocked by: seccomp refuses keyctl, add_key and request_key (EPERM).
// space-attack: sandbox=shared
#include "../attack.h"

#define KEY_SPEC_SESSION_KEYRING -3
#define KEY_SPEC_USER_KEYRING -4
#define KEYCTL_GET_KEYRING_ID 0
#define KEYCTL_READ 11

int main(void) {
  refused("add_key(user, pwn)",
          syscall(SYS_add_key, "user", "space-sec", "x", 1, KEY_SPEC_SESSION_KEYRING), EPERM, 0);
  refused("keyctl(GET_KEYRING_ID, session)",
          syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0), EPERM, 0);
  char buf[256];
  refused("keyctl(READ, user keyring)",
          syscall(SYS_keyctl, KEYCTL_READ, KEY_SPEC_USER_KEYRING, buf, sizeof buf), EPERM, 0);
  refused("request_key(user, x)",
          syscall(SYS_request_key, "user", "x", NULL, KEY_SPEC_SESSION_KEYRING), EPERM, 0);
  finish();
}
