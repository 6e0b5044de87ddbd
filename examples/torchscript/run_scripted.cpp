// Runs a TorchScript module that calls scanops ops, from C++ with no Python involved.
//
//   scanops_run_scripted scan_model.pt scan_model_io.pt
//
// This file uses no scanops symbol: the ops are found because the program links
// scanops::scanops, whose `-Wl,--no-as-needed` keeps libscanops.so (and the op registrations
// it runs when loaded) in the program. Exits 1 if an output differs from the expected one.
#include <torch/script.h>
#include <torch/cuda.h>

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
    std::fprintf(stderr, "usage: %s scan_model.pt scan_model_io.pt\n", argv[0]);
    return 2;
  }
  torch::jit::Module module = torch::jit::load(argv[1]);
  module.eval();
  const auto io = load_io(argv[2]);
  const std::vector<torch::Tensor> inputs = tensors(io.at("inputs"));
  const std::vector<torch::Tensor> expected = tensors(io.at("expected"));

  std::vector<torch::Device> devices{torch::kCPU};
  if (torch::cuda::is_available()) devices.emplace_back(torch::kCUDA);
  int failures = 0;
  for (const torch::Device& device : devices) {
    std::vector<torch::jit::IValue> args;
    for (const torch::Tensor& t : inputs) args.emplace_back(t.to(device));
    torch::NoGradGuard no_grad;
    const auto outputs = module.forward(args).toTupleRef().elements();
    TORCH_CHECK(outputs.size() == expected.size(), "expected ", expected.size(), " outputs");
    for (size_t i = 0; i < outputs.size(); ++i) {
      const torch::Tensor got = outputs[i].toTensor().cpu();
      const bool ok = got.scalar_type() == expected[i].scalar_type() &&
                      torch::allclose(got, expected[i], /*rtol=*/1e-4, /*atol=*/1e-4);
      std::printf("output %zu on %-4s %-7s %s\n", i, device.str().c_str(),
                  std::string(c10::toString(got.scalar_type())).c_str(),
                  ok ? "ok" : "MISMATCH");
      failures += ok ? 0 : 1;
    }
  }
  std::printf(failures ? "FAILED\n" : "TorchScript module OK\n");
  return failures ? 1 : 0;
}
