// Reconfigures the sandbox's network over rtnetlink to build a way out: add an address to lo,
// a default route, a veth pair and a dummy interface, and bring lo down.
// Blocked by: the network namespace is owned by the host's user namespace, so sandbox root
// has no CAP_NET_ADMIN over it: every change is refused (EPERM in the netlink ack).
// space-attack: sandbox=shared
#include <linux/if_addr.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/socket.h>

#include "../attack.h"

struct req {
  struct nlmsghdr nh;
  union {
    struct ifaddrmsg ifa;
    struct rtmsg rt;
    struct ifinfomsg ifi;
  };
  char attrs[256];
};

static void add_attr(struct req* r, unsigned short type, const void* data, size_t len) {
  struct rtattr* a = (struct rtattr*)((char*)r + NLMSG_ALIGN(r->nh.nlmsg_len));
  a->rta_type = type;
  a->rta_len = (unsigned short)RTA_LENGTH(len);
  memcpy(RTA_DATA(a), data, len);
  r->nh.nlmsg_len = NLMSG_ALIGN(r->nh.nlmsg_len) + RTA_ALIGN(a->rta_len);
}

static struct rtattr* begin_nest(struct req* r, unsigned short type) {
  struct rtattr* a = (struct rtattr*)((char*)r + NLMSG_ALIGN(r->nh.nlmsg_len));
  a->rta_type = type;
  a->rta_len = RTA_LENGTH(0);
  r->nh.nlmsg_len = NLMSG_ALIGN(r->nh.nlmsg_len) + RTA_ALIGN(a->rta_len);
  return a;
}

static void end_nest(struct req* r, struct rtattr* a) {
  a->rta_len = (unsigned short)((char*)r + r->nh.nlmsg_len - (char*)a);
}

static void send_and_check(int s, struct req* r, const char* what) {
  r->nh.nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
  if (send(s, r, r->nh.nlmsg_len, 0) < 0) {
    note("%s: send %s", what, errname(errno));
    return;
  }
  char buf[4096];
  ssize_t n = recv(s, buf, sizeof buf, 0);
  struct nlmsghdr* h = (struct nlmsghdr*)buf;
  if (n < (ssize_t)sizeof *h || h->nlmsg_type != NLMSG_ERROR) {
    note("%s: no ack", what);
    return;
  }
  int err = -((struct nlmsgerr*)NLMSG_DATA(h))->error;
  if (err == 0)
    escaped("%s accepted", what);
  else
    note("%s: %s", what, errname(err));
}

int main(void) {
  int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (s < 0) broken("netlink socket: %s", strerror(errno));
  int lo = (int)if_nametoindex("lo");

  struct req r;
  memset(&r, 0, sizeof r);
  r.nh.nlmsg_len = NLMSG_LENGTH(sizeof r.ifa);
  r.nh.nlmsg_type = RTM_NEWADDR;
  r.nh.nlmsg_flags = NLM_F_CREATE | NLM_F_EXCL;
  r.ifa.ifa_family = AF_INET;
  r.ifa.ifa_prefixlen = 24;
  r.ifa.ifa_index = (unsigned)lo;
  unsigned char addr[4] = {10, 99, 0, 2};
  add_attr(&r, IFA_LOCAL, addr, 4);
  add_attr(&r, IFA_ADDRESS, addr, 4);
  send_and_check(s, &r, "RTM_NEWADDR 10.99.0.2/24 on lo");

  memset(&r, 0, sizeof r);
  r.nh.nlmsg_len = NLMSG_LENGTH(sizeof r.rt);
  r.nh.nlmsg_type = RTM_NEWROUTE;
  r.nh.nlmsg_flags = NLM_F_CREATE | NLM_F_EXCL;
  r.rt.rtm_family = AF_INET;
  r.rt.rtm_table = RT_TABLE_MAIN;
  r.rt.rtm_protocol = RTPROT_STATIC;
  r.rt.rtm_scope = RT_SCOPE_LINK;
  r.rt.rtm_type = RTN_UNICAST;
  add_attr(&r, RTA_OIF, &lo, sizeof lo);
  send_and_check(s, &r, "RTM_NEWROUTE default dev lo");

  const char* kinds[] = {"veth", "dummy", "macvlan", "ipip"};
  for (size_t i = 0; i < 4; ++i) {
    memset(&r, 0, sizeof r);
    r.nh.nlmsg_len = NLMSG_LENGTH(sizeof r.ifi);
    r.nh.nlmsg_type = RTM_NEWLINK;
    r.nh.nlmsg_flags = NLM_F_CREATE | NLM_F_EXCL;
    r.ifi.ifi_family = AF_UNSPEC;
    char name[16];
    snprintf(name, sizeof name, "pwn%zu", i);
    add_attr(&r, IFLA_IFNAME, name, strlen(name) + 1);
    struct rtattr* info = begin_nest(&r, IFLA_LINKINFO);
    add_attr(&r, IFLA_INFO_KIND, kinds[i], strlen(kinds[i]));
    end_nest(&r, info);
    char what[64];
    snprintf(what, sizeof what, "RTM_NEWLINK %s", kinds[i]);
    send_and_check(s, &r, what);
  }

  memset(&r, 0, sizeof r);
  r.nh.nlmsg_len = NLMSG_LENGTH(sizeof r.ifi);
  r.nh.nlmsg_type = RTM_NEWLINK;
  r.ifi.ifi_family = AF_UNSPEC;
  r.ifi.ifi_index = lo;
  r.ifi.ifi_change = IFF_UP;
  r.ifi.ifi_flags = 0;
  send_and_check(s, &r, "RTM_NEWLINK lo down");
  finish();
}
