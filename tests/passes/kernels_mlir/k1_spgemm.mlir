// K1 SpGEMM: A[i,j] = sum_k B[i,k] * C[k,j]; B CSR, C CSC; loop order i, j, k.
#CSR = #sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : dense, d1 : compressed), posWidth = 32, crdWidth = 32 }>
#CSC = #sparse_tensor.encoding<{ map = (d0, d1) -> (d1 : dense, d0 : compressed), posWidth = 32, crdWidth = 32 }>
#trait = { indexing_maps = [affine_map<(i,j,k) -> (i,k)>, affine_map<(i,j,k) -> (k,j)>, affine_map<(i,j,k) -> (i,j)>],
  iterator_types = ["parallel", "parallel", "reduction"] }
func.func @k1(%b: tensor<8x8xf64, #CSR>, %c: tensor<8x8xf64, #CSC>, %a: tensor<8x8xf64> {bufferization.writable = true}) -> tensor<8x8xf64> {
  %r = linalg.generic #trait ins(%b, %c : tensor<8x8xf64, #CSR>, tensor<8x8xf64, #CSC>) outs(%a : tensor<8x8xf64>) {
  ^bb0(%x: f64, %y: f64, %z: f64):
    %m = arith.mulf %x, %y : f64
    %s = arith.addf %z, %m : f64
    linalg.yield %s : f64
  } -> tensor<8x8xf64>
  return %r : tensor<8x8xf64>
}
