// Opens the other netlink families that reach host-wide state: audit (read or disable the
// host's audit trail), netfilter (firewall rules), xfrm (IPsec policy), kobject uevents
// (listening works by design; sending does not), sock_diag of other namespaces, and
// generic netlink.
// Blocked by: audit exists only in the initial network namespace; netfilter and xfrm changes
// need CAP_NET_ADMIN over the host-owned namespace; sending uevents needs it too.
// space-attack: sandbox=shared
#include <linux/audit.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <sys/socket.h>

#include "../attack.h"

static int ack_errno(int s, struct nlmsghdr* req) {
  req->nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
  if (send(s, req, req->nlmsg_len, 0) < 0) return errno;
  char buf[8192];
  ssize_t n = recv(s, buf, sizeof buf, MSG_DONTWAIT);
  if (n <= 0) return EAGAIN;
  struct nlmsghdr* h = (struct nlmsghdr*)buf;
  if (h->nlmsg_type == NLMSG_ERROR) return -((struct nlmsgerr*)NLMSG_DATA(h))->error;
  return 0;  // a real answer
}

int main(void) {
  int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_AUDIT);
  if (s < 0) {
    note("NETLINK_AUDIT socket: %s", errname(errno));
  } else {
    struct nlmsghdr h = {.nlmsg_len = NLMSG_LENGTH(0), .nlmsg_type = AUDIT_GET};
    int err = ack_errno(s, &h);
    if (err == 0)
      escaped("AUDIT_GET answered: the host's audit subsystem is reachable");
    else
      note("AUDIT_GET: %s", errname(err));
    close(s);
  }
  s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (s < 0) {
    note("NETLINK_NETFILTER socket: %s", errname(errno));
  } else {
    struct {
      struct nlmsghdr h;
      struct nfgenmsg g;
    } m = {{.nlmsg_len = NLMSG_LENGTH(sizeof(struct nfgenmsg)),
            .nlmsg_type = (NFNL_SUBSYS_NFTABLES << 8) | 0 /* NFT_MSG_NEWTABLE */,
            .nlmsg_flags = NLM_F_CREATE},
           {.nfgen_family = 2}};
    int err = ack_errno(s, &m.h);
    if (err == 0)
      escaped("nftables NEWTABLE accepted");
    else
      note("nftables NEWTABLE: %s", errname(err));
    close(s);
  }
  s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_XFRM);
  if (s < 0) {
    note("NETLINK_XFRM socket: %s", errname(errno));
  } else {
    struct nlmsghdr h = {.nlmsg_len = NLMSG_LENGTH(0), .nlmsg_type = 0x11 /* XFRM_MSG_FLUSHSA */};
    int err = ack_errno(s, &h);
    if (err == 0)
      escaped("XFRM_MSG_FLUSHSA accepted");
    else
      note("XFRM flush: %s", errname(err));
    close(s);
  }
  s = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_KOBJECT_UEVENT);
  if (s >= 0) {
    struct sockaddr_nl to = {.nl_family = AF_NETLINK, .nl_groups = 1};
    const char msg[] = "add@/devices/space-sec\0ACTION=add\0DEVPATH=/devices/space-sec\0";
    ssize_t n = sendto(s, msg, sizeof msg, 0, (struct sockaddr*)&to, sizeof to);
    if (n >= 0)
      escaped("forged a uevent to the multicast group");
    else
      note("uevent send: %s", errname(errno));
    close(s);
  }
  finish();
}
