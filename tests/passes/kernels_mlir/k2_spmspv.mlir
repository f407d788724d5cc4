// K2 SpMSpV: a[i] = sum_k B[i,k] * c[k]; B CSR, c compressed vector; loop order i, k.
#CSR = #sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : dense, d1 : compressed), posWidth = 32, crdWidth = 32 }>
#SV = #sparse_tensor.encoding<{ map = (d0) -> (d0 : compressed), posWidth = 32, crdWidth = 32 }>
#trait = { indexing_maps = [affine_map<(i,k) -> (i,k)>, affine_map<(i,k) -> (k)>, affine_map<(i,k) -> (i)>],
  iterator_types = ["parallel", "reduction"] }
func.func @k2(%b: tensor<8x16xf64, #CSR>, %c: tensor<16xf64, #SV>, %a: tensor<8xf64> {bufferization.writable = true}) -> tensor<8xf64> {
  %r = linalg.generic #trait ins(%b, %c : tensor<8x16xf64, #CSR>, tensor<16xf64, #SV>) outs(%a : tensor<8xf64>) {
  ^bb0(%x: f64, %y: f64, %z: f64):
    %m = arith.mulf %x, %y : f64
    %s = arith.addf %z, %m : f64
    linalg.yield %s : f64
  } -> tensor<8xf64>
  return %r : tensor<8xf64>
}
