// Runs an AOTInductor package (.pt2) whose model calls scanops ops, from C++ with no Python.
//
//   scanops_run_aoti scan_model.pt2 scan_model_io.pt
//
// The compiled model calls the scanops ops through the PyTorch dispatcher (AOTInductor's
// proxy executor), so the op registrations must be in the process: the program links
// scanops::scanops (with `-Wl,--no-as-needed`) and uses no scanops symbol itself.
// Exits 1 if an output differs from the expected one.
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/script.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>

namespace {

// Reads the dict {"inputs": [...], "expected": [...]} written by torch.save in Python.
c10::Dict<c10::IValue, c10::IValue> load_io(const char* path) {
  std::ifstream file(path, std::ios::binary);
  TORCH_CHECK(file, "cannot open ", path);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(file)),
                                std::istreambuf_iterator<char>());
  return torch::jit::pickle_load(bytes).toGenericDict();
}

std::vector<torch::Tensor> tensors(const c10::IValue& list) {
  std::vector<torch::Tensor> out;
  for (const c10::IValue& v : list.toListRef()) out.push_back(v.toTensor());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s scan_model.pt2 scan_model_io.pt\n", argv[0]);
    return 2;
  }
  torch::inductor::AOTIModelPackageLoader loader(argv[1]);
  // The package was compiled for one device type ("cpu" or "cuda"): feed it inputs there.
  const torch::Device device(loader.get_metadata().at("AOTI_DEVICE_KEY"));
  const auto io = load_io(argv[2]);
  std::vector<torch::Tensor> inputs;
  for (const torch::Tensor& t : tensors(io.at("inputs"))) inputs.push_back(t.to(device));
  const std::vector<torch::Tensor> expected = tensors(io.at("expected"));

  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor> outputs = loader.run(inputs);
  TORCH_CHECK(outputs.size() == expected.size(), "expected ", expected.size(), " outputs");
  int failures = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const torch::Tensor got = outputs[i].cpu();
    const bool ok = got.scalar_type() == expected[i].scalar_type() &&
                    got.sizes() == expected[i].sizes() &&
                    torch::allclose(got, expected[i], /*rtol=*/1e-4, /*atol=*/1e-4);
    std::printf("output %zu on %-4s %-7s %s\n", i, device.str().c_str(),
                std::string(c10::toString(got.scalar_type())).c_str(), ok ? "ok" : "MISMATCH");
    failures += ok ? 0 : 1;
  }
  std::printf(failures ? "FAILED\n" : "AOTInductor package OK\n");
  return failures ? 1 : 0;
}
