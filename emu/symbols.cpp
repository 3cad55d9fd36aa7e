// The demangled name of a kernel from its address, and the label launches are
// reported under, for fault messages and fault injection: LAUNCH_KERNEL only knows the token it was given, and launchers often
// pass an alias (`auto kernel = classifier_kernel<T>;`). Read from the symbol
// table of the running executable (every emulated kernel is linked into it);
// empty when the table is missing (a stripped binary).
#include <cxxabi.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "emu/runtime_internal.h"

namespace gpt2 {
namespace emu {
namespace {

// The executable's load bias (0 unless it is position-independent).
uintptr_t executable_bias() {
  uintptr_t bias = 0;
  dl_iterate_phdr([](dl_phdr_info* info, size_t, void* out) {
    *static_cast<uintptr_t*>(out) = info->dlpi_addr;
    return 1;  // the first object is the executable
  }, &bias);
  return bias;
}

std::string demangle(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && d != nullptr ? d : name;
  std::free(d);
  return out;
}

// Function symbols of /proc/self/exe: runtime address -> mangled name.
std::unordered_map<uintptr_t, std::string> read_function_symbols() {
  std::unordered_map<uintptr_t, std::string> table;
  const int fd = open("/proc/self/exe", O_RDONLY);
  if (fd < 0) return table;
  struct stat st {};
  void* map = fstat(fd, &st) == 0 ? mmap(nullptr, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  close(fd);
  if (map == MAP_FAILED) return table;
  const auto* base = static_cast<const unsigned char*>(map);
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
  const auto* sections = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
  const uintptr_t bias = executable_bias();
  for (int i = 0; i < eh->e_shnum; i++) {
    if (sections[i].sh_type != SHT_SYMTAB) continue;
    const auto* syms = reinterpret_cast<const Elf64_Sym*>(base + sections[i].sh_offset);
    const char* names = reinterpret_cast<const char*>(base + sections[sections[i].sh_link].sh_offset);
    for (size_t k = 0; k < sections[i].sh_size / sizeof(Elf64_Sym); k++)
      if (ELF64_ST_TYPE(syms[k].st_info) == STT_FUNC && syms[k].st_value != 0)
        table.emplace(bias + syms[k].st_value, names + syms[k].st_name);
  }
  munmap(map, st.st_size);
  return table;
}

}  // namespace

std::string kernel_symbol_name(const void* kernel) {
  static std::once_flag once;
  static std::unordered_map<uintptr_t, std::string> table;
  std::call_once(once, [] { table = read_function_symbols(); });
  auto it = table.find(reinterpret_cast<uintptr_t>(kernel));
  return it == table.end() ? std::string() : demangle(it->second.c_str());
}


// "token (symbol)" when the launch named an alias of the kernel, e.g.
// "kernel (gpt2::kern::classifier_kernel<float>)": fault messages and injection use it.
static std::string make_kernel_label(const void* kernel_id, const char* kernel_name) {
  std::string symbol = kernel_symbol_name(kernel_id);
  for (size_t at; (at = symbol.find("(anonymous namespace)::")) != std::string::npos;) symbol.erase(at, 23);
  symbol = symbol.substr(0, symbol.find('('));  // drop the parameter list
  if (symbol.compare(0, 5, "void ") == 0) symbol.erase(0, 5);  // a template's return type
  if (symbol.empty() || symbol == kernel_name) return kernel_name;
  const size_t colon = symbol.rfind("::", symbol.find('<'));
  const std::string base = symbol.substr(colon == std::string::npos ? 0 : colon + 2);
  return base.compare(0, std::strlen(kernel_name), kernel_name) == 0 ? symbol
                                                                      : std::string(kernel_name) + " (" + symbol + ")";
}

// Cached per kernel and launch-site name (the symbol lookup and demangling run once).
const std::string& kernel_label(const void* kernel_id, const char* kernel_name) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, std::string>, std::string> labels;
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_pair(kernel_id, std::string(kernel_name));
  auto it = labels.find(key);
  if (it == labels.end()) it = labels.emplace(key, make_kernel_label(kernel_id, kernel_name)).first;
  return it->second;  // std::map nodes are stable
}

}  // namespace emu
}  // namespace gpt2
