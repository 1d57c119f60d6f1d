// The qemu runtime's accelerator verdict; see accel_probe.h.
#include "runtime/qemu/accel_probe.h"

#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <ctime>
#include <fstream>
#include <sstream>

#include "host/host_files.h"
#include "proto/guest_boot.h"
#include "runtime/qemu/qemu_args.h"
#include "runtime/vm_host.h"

namespace space::runtime::qemu {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string identity(const fs::path& p) {
  struct stat st;
  if (::stat(p.c_str(), &st) != 0) return p.string() + " (missing)";
  return p.string() + " " + std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) +
         "." + std::to_string(st.st_mtim.tv_nsec) + " " + std::to_string(st.st_ino);
}

}  // namespace

std::string probe_key(const AccelInputs& in) {
  struct utsname u {};
  ::uname(&u);
  return "boot " + host::read_text("/proc/sys/kernel/random/boot_id").value_or("") +
         "\nhost kernel " + u.release + "\nqemu " + identity(in.qemu) + "\nkernel " +
         identity(in.kernel) + "\ninitrd " + identity(in.initrd) + "\ndevice " +
         in.kvm_device.string();
}

Result<void> boot_probe(const AccelInputs& in, const std::string& accel, const fs::path& work) {
  const fs::path console = work / "console.log", log = work / "qemu.log";
  std::vector<std::string> argv = {
      in.qemu.string(),
      "-M",
      kMachine,
      "-accel",
      accel == "kvm" ? std::string("kvm") : std::string("tcg"),
      "-cpu",
      accel == "kvm" ? "host" : "max",
      "-m",
      "128M",
      "-smp",
      "1",
      "-nodefaults",
      "-no-user-config",
      "-nographic",
      "-no-reboot",
      "-nic",
      "none",
      "-kernel",
      in.kernel.string(),
      "-initrd",
      in.initrd.string(),
      "-append",
      std::string(kGuestCmdline) + " space.probe=1",
      "-chardev",
      "file,id=con,path=" + console.string(),
      "-serial",
      "chardev:con",
      "-sandbox",
      kQemuSandbox,
  };
  auto ran = vm::run_tool(argv, log, in.timeout);
  // The marker is what counts: a QEMU killed at the deadline after the guest printed it (an
  // ACPI-less power-off that halts) still proves the boot.
  std::string out = host::read_text(console).value_or("");
  if (out.find(proto::kProbeMarker) != std::string::npos) return {};
  std::string what = ran ? "the guest ended without reaching its init"
                     : ran.error().code() == Code::kTimeout
                         ? "the guest did not reach its init within " +
                               std::to_string(in.timeout.count() / 1000) + " s"
                         : "QEMU failed";
  return fail(Code::kUnavailable,
              "a test boot of the guest kernel under " + accel + " failed: " + what +
                  "; QEMU said:" + vm::tail_of(log, 3) +
                  "\nthe guest console's last lines:" + vm::tail_of(console, 3));
}

AccelVerdict decide_kvm(const AccelInputs& in) {
  AccelVerdict v = vm::judge_kvm_facts(vm::gather_kvm_facts(in.kvm_device, in.sys_module));
  if (!v.usable) return v;
  AccelVerdict proven = probe_cached(in, "kvm");
  proven.facts = std::move(v.facts);
  return proven;
}

AccelVerdict probe_cached(const AccelInputs& in, const std::string& accel) {
  AccelVerdict v;
  const std::string key = "accel " + accel + "\n" + probe_key(in);
  if (!in.cache.empty()) {
    std::ifstream f(in.cache);
    json cached = json::parse(f, nullptr, false);
    if (cached.is_object() && cached.value("key", "") == key && cached.contains("usable") &&
        cached["usable"].is_boolean()) {
      v.usable = cached["usable"].get<bool>();
      v.reason = v.usable ? "" : cached.value("reason", "the cached boot probe failed");
      v.how = "boot probe (cached)";
      return v;
    }
  }

  v.how = "boot probe";
  fs::path base = in.cache.empty() ? fs::temp_directory_path() : in.cache.parent_path();
  std::string tmpl = (base / "accel-probe.XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    v.reason = Error::sys("mkdtemp", tmpl).wrap("preparing the boot probe").message();
    return v;  // not cached: nothing was learnt about the accelerator
  }
  fs::path work = tmpl;
  auto r = boot_probe(in, accel, work);
  std::error_code ec;
  fs::remove_all(work, ec);
  v.usable = r.has_value();
  if (!r) v.reason = r.error().message();
  if (!in.cache.empty()) {
    json out = {{"key", key},
                {"usable", v.usable},
                {"reason", v.reason},
                {"probed_at", static_cast<int64_t>(std::time(nullptr))}};
    fs::path tmp = in.cache;
    tmp += ".tmp";
    {
      std::ofstream o(tmp, std::ios::trunc);
      o << out.dump() << '\n';
    }
    fs::rename(tmp, in.cache, ec);
  }
  return v;
}

}  // namespace space::runtime::qemu
