// The KVM device facts and their verdict; see kvm.h.
#include "runtime/kvm.h"

#include <fcntl.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/fd.h"

namespace space::runtime::vm {
namespace fs = std::filesystem;

namespace {

// Modules that make a /dev/kvm: the hardware vendors' and PVM's (a paravirtualised KVM that
// runs inside an ordinary VM without nested virtualization).
constexpr const char* kVendorModules[] = {"kvm_amd", "kvm_intel", "kvm_pvm"};

bool has_vendor(const std::string& list, std::string_view m) {
  size_t pos = 0;
  while ((pos = list.find(m, pos)) != std::string::npos) {
    size_t end = pos + m.size();
    if ((pos == 0 || list[pos - 1] == ',') && (end == list.size() || list[end] == ',')) return true;
    pos = end;
  }
  return false;
}

}  // namespace

nlohmann::json KvmFacts::to_json() const {
  nlohmann::json j = {{"device", device}, {"present", present}};
  if (sysfs_seen) j["modules"] = vendor_modules;
  if (!present) return j;
  j["kvm_node"] = is_kvm_node;
  j["opens"] = open_errno == 0;
  if (open_errno) j["open_error"] = std::string(errno_name(open_errno));
  if (api_version >= 0) j["api_version"] = api_version;
  if (create_vm_errno >= 0) j["create_vm"] = create_vm_errno == 0;
  return j;
}

KvmFacts gather_kvm_facts(const fs::path& device, const fs::path& sys_module) {
  KvmFacts f;
  f.device = device.string();
  // The modules first: they are read even where the node is missing.
  if (::access((sys_module / "kvm").c_str(), F_OK) == 0) {
    f.sysfs_seen = true;
    for (const char* m : kVendorModules)
      if (::access((sys_module / m).c_str(), F_OK) == 0)
        f.vendor_modules += (f.vendor_modules.empty() ? "" : ",") + std::string(m);
  }
  struct stat st;
  if (::stat(device.c_str(), &st) != 0) return f;
  f.present = true;
  f.is_kvm_node =
      S_ISCHR(st.st_mode) && major(st.st_rdev) == kKvmMajor && minor(st.st_rdev) == kKvmMinor;
  if (!f.is_kvm_node) return f;
  UniqueFd kvm(::open(device.c_str(), O_RDWR | O_CLOEXEC));
  if (!kvm) {
    f.open_errno = errno;
    return f;
  }
  f.api_version = ::ioctl(kvm.get(), KVM_GET_API_VERSION, 0);
  if (f.api_version != kKvmApiVersion) return f;
  // A VM with no memory and no vCPU: proves the module takes VMs, and goes with the fd.
  UniqueFd vm(::ioctl(kvm.get(), KVM_CREATE_VM, 0UL));
  f.create_vm_errno = vm ? 0 : errno;
  return f;
}

std::string kvm_non_starter(const KvmFacts& f) {
  const bool pvm_only = f.sysfs_seen && has_vendor(f.vendor_modules, "kvm_pvm") &&
                        !has_vendor(f.vendor_modules, "kvm_intel") &&
                        !has_vendor(f.vendor_modules, "kvm_amd");
  if (!f.present)
    return "no " + f.device +
           ": this host has no KVM (it needs a bare-metal host, or a VM with nested "
           "virtualization, and the kvm_intel or kvm_amd module)" +
           (pvm_only ? "; the kvm_pvm module is loaded, but nested PVM runs only guest kernels "
                       "built for PVM"
                     : "");
  if (!f.is_kvm_node)
    return f.device + " is not the KVM device (a character device " + std::to_string(kKvmMajor) +
           ":" + std::to_string(kKvmMinor) + ")";
  if (f.open_errno)
    return "cannot open " + f.device + " (" + std::string(errno_name(f.open_errno)) + ")" +
           (f.open_errno == EACCES || f.open_errno == EPERM ? ": run spaced as root" : "");
  if (f.api_version != kKvmApiVersion)
    return f.device + " speaks KVM API " + std::to_string(f.api_version) + ", not " +
           std::to_string(kKvmApiVersion);
  if (f.create_vm_errno != 0)
    return "KVM_CREATE_VM on " + f.device + " fails (" +
           std::string(errno_name(f.create_vm_errno)) + ")";
  if (pvm_only)
    return f.device +
           " is nested PVM (module kvm_pvm): it runs only guest kernels built for PVM, and "
           "the microVM guest is a stock x86 kernel (QEMU aborts on MSR 0x10a with -cpu host; "
           "without that CPU feature the guest never starts)";
  if (f.sysfs_seen && f.vendor_modules.empty())
    return f.device + " has no vendor module behind it (neither kvm_intel nor kvm_amd is loaded)";
  return "";
}

nlohmann::json KvmVerdict::to_json() const {
  nlohmann::json j = facts.to_json();
  j["usable"] = usable;
  j["decided_by"] = how;
  if (!reason.empty()) j["reason"] = reason;
  return j;
}

KvmVerdict judge_kvm_facts(KvmFacts facts) {
  KvmVerdict v;
  v.reason = kvm_non_starter(facts);
  v.usable = v.reason.empty();
  v.how = "device facts";
  v.facts = std::move(facts);
  return v;
}

Result<void> make_private_device_node(const fs::path& path, dev_t dev, uid_t owner) {
  // mknod applies the umask, fchmodat makes the mode exact; the node is made before it is
  // handed to anyone, so nothing can race it between the calls.
  if (::mknod(path.c_str(), S_IFCHR | 0600, dev) != 0) return fail_sys("mknod", path.string());
  if (::chown(path.c_str(), owner, owner) != 0 || ::chmod(path.c_str(), 0600) != 0) {
    int err = errno;
    ::unlink(path.c_str());
    return fail_sys("chown", path.string(), err);
  }
  return {};
}

}  // namespace space::runtime::vm
